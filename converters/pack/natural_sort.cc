#include "pack/natural_sort.h"

#include <algorithm>

namespace libshard::convert {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Three-way natural comparison of two path components (no '/').
int CompareComponent(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  int zeros_tiebreak = 0;  // first difference in leading-zero count, used only if all else ties
  while (i < a.size() && j < b.size()) {
    if (IsDigit(a[i]) && IsDigit(b[j])) {
      size_t ia = i, jb = j;
      while (ia < a.size() && a[ia] == '0') ++ia;
      while (jb < b.size() && b[jb] == '0') ++jb;
      size_t ea = ia, eb = jb;
      while (ea < a.size() && IsDigit(a[ea])) ++ea;
      while (eb < b.size() && IsDigit(b[eb])) ++eb;
      const size_t la = ea - ia, lb = eb - jb;  // significant digits
      if (la != lb) return la < lb ? -1 : 1;
      const int c = a.substr(ia, la).compare(b.substr(jb, lb));
      if (c != 0) return c < 0 ? -1 : 1;
      if (zeros_tiebreak == 0 && (ea - i) != (eb - j)) zeros_tiebreak = (ea - i) < (eb - j) ? -1 : 1;
      i = ea;
      j = eb;
      continue;
    }
    const auto ca = static_cast<unsigned char>(a[i]), cb = static_cast<unsigned char>(b[j]);
    if (ca != cb) return ca < cb ? -1 : 1;
    ++i;
    ++j;
  }
  if (i < a.size()) return 1;   // b is a prefix of a
  if (j < b.size()) return -1;
  return zeros_tiebreak;
}

}  // namespace

bool NaturalLess(std::string_view a, std::string_view b) {
  while (true) {
    const size_t sa = a.find('/'), sb = b.find('/');
    const std::string_view ca = a.substr(0, sa), cb = b.substr(0, sb);
    const int c = CompareComponent(ca, cb);
    if (c != 0) return c < 0;
    const bool a_more = sa != std::string_view::npos, b_more = sb != std::string_view::npos;
    if (!a_more || !b_more) return !a_more && b_more;  // a file sorts before a deeper path
    a.remove_prefix(sa + 1);
    b.remove_prefix(sb + 1);
  }
}

void NaturalSort(std::vector<std::string>& paths) {
  std::sort(paths.begin(), paths.end(),
            [](const std::string& x, const std::string& y) { return NaturalLess(x, y); });
}

}  // namespace libshard::convert
