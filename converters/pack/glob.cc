#include "pack/glob.h"

#include <vector>

namespace libshard::convert {
namespace {

// One compiled pattern element.
struct Token {
  enum Kind { kLiteral, kAny, kStar, kDoubleStar, kClass } kind = kLiteral;
  char literal = 0;
  std::vector<std::pair<unsigned char, unsigned char>> ranges;  // for kClass
  bool negate = false;
};

Token MakeToken(Token::Kind kind, char literal = 0) {
  Token t;
  t.kind = kind;
  t.literal = literal;
  return t;
}

std::vector<Token> Compile(std::string_view p) {
  std::vector<Token> out;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '*') {
      if (i + 1 < p.size() && p[i + 1] == '*') {
        out.push_back(MakeToken(Token::kDoubleStar));
        while (i + 1 < p.size() && p[i + 1] == '*') ++i;
        // "**/" also matches zero directories: "a/**/b" matches "a/b".
        if (i + 1 < p.size() && p[i + 1] == '/') {
          ++i;
          out.back().literal = '/';
        }
      } else {
        out.push_back(MakeToken(Token::kStar));
      }
    } else if (c == '?') {
      out.push_back(MakeToken(Token::kAny));
    } else if (c == '[') {
      size_t j = i + 1;
      Token t = MakeToken(Token::kClass);
      if (j < p.size() && (p[j] == '!' || p[j] == '^')) {
        t.negate = true;
        ++j;
      }
      bool closed = false;
      bool first = true;
      while (j < p.size()) {
        if (p[j] == ']' && !first) {
          closed = true;
          break;
        }
        first = false;
        unsigned char lo = static_cast<unsigned char>(p[j]);
        if (p[j] == '\\' && j + 1 < p.size()) lo = static_cast<unsigned char>(p[++j]);
        unsigned char hi = lo;
        if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
          hi = static_cast<unsigned char>(p[j + 2]);
          j += 2;
        }
        t.ranges.emplace_back(lo, hi);
        ++j;
      }
      if (closed) {
        out.push_back(std::move(t));
        i = j;
      } else {
        out.push_back(MakeToken(Token::kLiteral, '['));  // an unclosed '[' is literal
      }
    } else if (c == '\\' && i + 1 < p.size()) {
      out.push_back(MakeToken(Token::kLiteral, p[++i]));
    } else {
      out.push_back(MakeToken(Token::kLiteral, c));
    }
  }
  return out;
}

bool ClassMatches(const Token& t, unsigned char c) {
  bool in = false;
  for (auto [lo, hi] : t.ranges) in = in || (c >= lo && c <= hi);
  return in != t.negate && c != '/';
}

// Dynamic programming over (token, character): reach[j] = tokens[0..k) can match s[0..j).
bool Match(const std::vector<Token>& tokens, std::string_view s) {
  const size_t n = s.size();
  std::vector<char> reach(n + 1, 0), next(n + 1, 0);
  reach[0] = 1;
  for (const Token& t : tokens) {
    std::fill(next.begin(), next.end(), 0);
    switch (t.kind) {
      case Token::kLiteral:
        for (size_t j = 0; j < n; ++j) next[j + 1] = reach[j] && s[j] == t.literal;
        break;
      case Token::kAny:
        for (size_t j = 0; j < n; ++j) next[j + 1] = reach[j] && s[j] != '/';
        break;
      case Token::kClass:
        for (size_t j = 0; j < n; ++j)
          next[j + 1] = reach[j] && ClassMatches(t, static_cast<unsigned char>(s[j]));
        break;
      case Token::kStar:
        for (size_t j = 0; j <= n; ++j)
          next[j] = reach[j] || (j > 0 && next[j - 1] && s[j - 1] != '/');
        break;
      case Token::kDoubleStar:
        if (t.literal == '/') {
          // "**/": empty, or any run that ends with '/'.
          bool seen = false;
          for (size_t j = 0; j <= n; ++j) {
            if (j > 0 && seen && s[j - 1] == '/') next[j] = 1;
            if (reach[j]) {
              next[j] = 1;
              seen = true;
            }
          }
        } else {
          for (size_t j = 0; j <= n; ++j) next[j] = reach[j] || (j > 0 && next[j - 1]);
        }
        break;
    }
    reach.swap(next);
  }
  return reach[n] != 0;
}

}  // namespace

bool GlobMatch(std::string_view pattern, std::string_view path) {
  if (pattern.find('/') == std::string_view::npos) {
    const size_t slash = path.rfind('/');
    if (slash != std::string_view::npos) path.remove_prefix(slash + 1);
  } else if (!pattern.empty() && pattern.front() == '/') {
    pattern.remove_prefix(1);  // anchored at the root: paths are already root-relative
  }
  return Match(Compile(pattern), path);
}

bool PassesFilters(std::string_view rel_path, const std::vector<std::string>& includes,
                   const std::vector<std::string>& excludes) {
  bool included = includes.empty();
  for (const auto& p : includes) included = included || GlobMatch(p, rel_path);
  if (!included) return false;
  for (const auto& p : excludes)
    if (GlobMatch(p, rel_path)) return false;
  return true;
}

}  // namespace libshard::convert
