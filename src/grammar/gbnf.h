// grammar/gbnf.h — llama.cpp's GBNF grammar format converted to llguidance's Lark dialect.
//
// GBNF (llama.cpp grammars/README.md): rules `name ::= expr`, names of [A-Za-z0-9-], the
// start rule `root`; expressions of string literals "..." (escapes \n \r \t \\ \" \xHH
// \uHHHH \UHHHHHHHH), character classes [a-z] / [^...] (same escapes), `.` (any
// character), rule references, groups ( ), alternatives |, repetition * + ? {m} {m,}
// {m,n}; `#` starts a comment. Newlines are whitespace (a rule ends where the next
// `name ::=` starts).
// The conversion keeps GBNF's character-level meaning: every literal character and
// every class is its own one-character lexeme (llguidance lexes lexemes greedily, which
// multi-character literals could change), so the Earley parser sees the grammar as GBNF
// defines it. Rule names become r_<name> ('-' -> "_h", an upper-case letter X -> "_u"x),
// `start: r_root`.
#pragma once

#include <string>
#include <string_view>

#include "specula/status.h"

namespace specula {

// Errors name the problem and its line: "GBNF line 3: unterminated string", "GBNF: no
// rule 'root'", "GBNF line 2: undefined rule 'value'", "GBNF line 1: expected '::='".
Result<std::string> gbnf_to_lark(std::string_view gbnf);

}  // namespace specula
