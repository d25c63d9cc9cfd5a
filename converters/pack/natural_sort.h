// Natural ("human") ordering of relative paths: the sample order of a packed dataset
// (`data_2` before `data_10`, the order users expect from numbered dumps; README.md promises it).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace libshard::convert {

// Strict weak order on '/'-separated relative paths. Paths are compared component by component
// (so a directory's files stay together and "a/b" sorts before "a-b"); within a component, runs
// of ASCII digits compare by numeric value (any length, no overflow), everything else bytewise.
// Equal numeric values with different leading zeros ("7" vs "007") order by fewer digits first, so
// distinct strings never compare equivalent and the order is total and deterministic.
bool NaturalLess(std::string_view a, std::string_view b);

// Sorts `paths` in place by NaturalLess.
void NaturalSort(std::vector<std::string>& paths);

}  // namespace libshard::convert
