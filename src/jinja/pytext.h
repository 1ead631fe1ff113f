// jinja/pytext.h — the Python library algorithms behind Jinja2's text filters.
//
// Owns: printf-style formatting (`str % args`, the `format` filter), textwrap.wrap as
// the `wordwrap` filter calls it, pprint.pformat (`pprint`), str.center, markupsafe's
// escape and striptags with html.unescape, urllib's quoting (`urlencode`) and the number
// formatting of `filesizeformat`. Semantics are CPython 3.11's (printf-style formatting
// as documented for str.__mod__, Lib/textwrap.py, Lib/pprint.py, Lib/html) over the
// interpreter's values; failures are JinjaError carrying Python's message.
// Does not evaluate templates or read filter arguments (jinja/eval.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/value.h"

namespace specula::jinja {

// Python `fmt % args`. A tuple (is_tuple list) gives the positional arguments; any other
// value is the one argument, and a dict or a (non-tuple) list is also the mapping that
// %(name)s reads. `escape_args` (fmt is a Markup): what %s, %r and %a insert is escaped.
std::string percent_format(const std::string& fmt, const Value& args, bool escape_args);

// markupsafe.escape of text: & < > " ' as &amp; &lt; &gt; &#34; &#39;.
std::string html_escape(std::string_view s);
// html.unescape: numeric character references and the named ones in kNamedEntities
// (the HTML 4 set, the legacy names that need no ';', and common typography).
std::string html_unescape(std::string_view s);
// markupsafe Markup.striptags: comments, then tags, removed; whitespace runs collapsed
// to one space; entities unescaped.
std::string strip_tags(std::string_view s);
// urllib.parse.quote of the UTF-8 bytes with '/' safe; `for_qs`: nothing safe but the
// unreserved characters, and spaces as '+'.
std::string url_quote(std::string_view s, bool for_qs);

// Python str.center(width) (code points; odd padding goes left when width is odd).
std::string py_center(const std::string& s, int64_t width);

// textwrap.wrap(text, width, expand_tabs=False, replace_whitespace=False,
// break_long_words, break_on_hyphens). JinjaError when width <= 0.
std::vector<std::string> text_wrap(std::string_view text, int64_t width, bool break_long_words, bool break_on_hyphens);

// pprint.pformat(v) (width 80, indent 1, dicts sorted by key).
std::string pformat(const Value& v);

// jinja2's filesizeformat of float(value).
std::string filesize_format(double bytes, bool binary);

}  // namespace specula::jinja
