// Text that comes from files. FORMAT.md §1 makes names, source paths and metadata strings raw
// bytes, UTF-8 by convention; field names must be well-formed UTF-8 (§3.2). These helpers check
// that rule and render untrusted bytes safely inside messages, reports and Python strings.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace libshard {

// Well-formed UTF-8 (RFC 3629): no overlong forms, no surrogates (U+D800..DFFF, which is what a
// Python str holding a surrogate-escaped byte pickles to), nothing above U+10FFFF.
bool IsValidUtf8(std::string_view s);

// `s` when it is well-formed UTF-8, else `s` with every byte >= 0x80 written as \xNN: text from
// files made safe for a UTF-8 report (skipped.txt) or a Python str.
std::string EscapeNonUtf8(std::string_view s);

// A bounded rendering of bytes from a file for a message: printable ASCII as is, every other
// byte as \xNN, at most `max_bytes` input bytes, then "...".
std::string PrintableBytes(std::string_view s, size_t max_bytes = 200);

// JSON parsers recurse once per level of nested arrays and objects, so JSON from a file is
// checked before it is parsed: the offset of the first '[' or '{' that opens a level deeper than
// `max_depth`, or std::string_view::npos. Brackets inside strings do not count; malformed JSON
// passes (the parser rejects it, with its depth then known to be bounded). Linear time, no
// allocation.
size_t JsonTooDeepAt(std::string_view text, size_t max_depth);

// Option text typed by a user: `s` without leading and trailing spaces and tabs, and an ASCII
// lower-case copy (the byte-size parser and the CLI's option parsers share them).
std::string_view TrimBlanks(std::string_view s);
std::string AsciiLower(std::string_view s);

}  // namespace libshard
