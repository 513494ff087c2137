/* The program tests/export_e2e_test.cc records and exports: a few named
 * functions calling each other, so perf's symbols can be checked against
 * the trace. Static (soft BTS would otherwise single-step the dynamic
 * loader for seconds), -O0 and not stripped (tests/BUILD). */
__attribute__((noinline)) int pfm_export_leaf(int x) { return x * 3 + 1; }

__attribute__((noinline)) int pfm_export_middle(int n) {
  int sum = 0;
  for (int i = 0; i < n; ++i) sum += pfm_export_leaf(i);
  return sum;
}

int main(void) { return pfm_export_middle(25) == 925 ? 0 : 1; }
