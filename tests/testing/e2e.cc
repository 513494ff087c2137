#include "tests/testing/e2e.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace pfm::testing {

uint64_t Num(const boost::json::value& v) { return v.to_number<uint64_t>(); }

uint64_t Addr(const boost::json::value& v) {
  return std::stoull(std::string(v.as_string()), nullptr, 16);
}

std::string Str(const boost::json::value& v) {
  return v.is_string() ? std::string(v.as_string()) : boost::json::serialize(v);
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

size_t CountOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1))
    ++n;
  return n;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ReadAll(int fd) {
  std::string s;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      s.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return s;
    }
  }
}

int FdCount(pid_t pid) {
  DIR* dir = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (dir == nullptr) return -1;
  int n = 0;
  while (const dirent* e = ::readdir(dir)) n += e->d_name[0] != '.';
  ::closedir(dir);
  return n;
}

void DaemonTest::StartDaemon(std::vector<std::string> flags) {
  d_ = std::make_unique<Daemon>(std::move(flags));
  ASSERT_TRUE(d_->started());
}

void DaemonTest::StartSim(const std::vector<std::string>& extra) {
  std::vector<std::string> flags = {"--driver", "sim"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  StartDaemon(std::move(flags));
}

uint64_t DaemonTest::Create(std::vector<std::string> flags) {
  flags.insert(flags.begin(), {"session", "create"});
  return Num(PfmctlJson(socket(), std::move(flags)).at("id"));
}

ScopedChild::~ScopedChild() {
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

}  // namespace pfm::testing
