#include "userspace/pfmctl/render.h"

#include "absl/strings/str_format.h"

namespace pfm {
namespace {

namespace json = boost::json;

std::string S(const json::object& o, const char* k) {
  const json::value* v = o.if_contains(k);
  if (v == nullptr || v->is_null()) return "-";
  if (v->is_string()) return std::string(v->as_string());
  return json::serialize(*v);
}

std::string Ratio(const json::object& o) {
  const json::value* v = o.if_contains("ratio");
  if (v == nullptr || v->is_null()) return "not counted";
  return absl::StrFormat("%.1f%%", 100.0 * v->to_number<double>());
}

void PrintHolders(std::ostream& out, const json::array& rows) {
  for (const json::value& rv : rows) {
    const json::object& r = rv.as_object();
    out << absl::StrFormat("    %-10s %-28s session %-4s %-8s %-8s running %s\n",
                           S(r, "slot"), S(r, "what"), S(r, "session"), S(r, "mode"),
                           S(r, "state"), Ratio(r));
  }
}

}  // namespace

void PrintResources(std::ostream& out, const json::object& r) {
  if (const json::value* cpus = r.if_contains("cpus")) {
    for (const json::value& cv : cpus->as_array()) {
      const json::object& c = cv.as_object();
      out << "cpu " << S(c, "cpu") << " (running pid " << S(c, "running_pid") << ")\n";
      if (const json::value* h = c.if_contains("holders")) PrintHolders(out, h->as_array());
    }
  }
  if (const json::value* tasks = r.if_contains("tasks")) {
    for (const json::value& tv : tasks->as_array()) {
      const json::object& t = tv.as_object();
      out << "task " << S(t, "pid") << "\n";
      if (const json::value* h = t.if_contains("holders")) PrintHolders(out, h->as_array());
    }
  }
}

}  // namespace pfm
