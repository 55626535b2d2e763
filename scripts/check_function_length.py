#!/usr/bin/env python3
"""Lists the C++ functions longer than a limit (issue 30: "No function in
src/ibd over 80 lines").

    scripts/check_function_length.py [--max N] FILE|DIR...
    scripts/check_function_length.py --self-test

A directory stands for its *.cpp, *.cc, *.hpp and *.h files (not its
subdirectories). Each function defined at namespace or class level (free
functions, member functions defined out of line or in their class, test
cases) is measured from the line of its name to the line of its closing
brace; lambdas and local classes count as part of the function around them.
Each one over the limit is printed as `file:line name N lines` and the exit
status is 1; 0 when none is.

Not a C++ parser: comments, string and character literals (raw strings too)
and preprocessor lines are blanked first, so that braces in them do not
count, then braces are matched. A brace at namespace or class level opens a
scope (namespace, class, struct, union, extern "C"), a function body (what
precedes it has a parameter list and no `=` outside brackets), or else an
initializer or an enum, which is skipped.
"""

import argparse
import os
import re
import sys

EXTENSIONS = (".cpp", ".cc", ".hpp", ".h")


def blank(text):
    """The text with comments, literals' contents and preprocessor lines
    replaced by spaces (newlines kept, so line numbers stay). String and
    character literals keep their quotes."""
    out = list(text)
    n = len(text)
    i = 0
    line_start = True  # only blanks since the last newline

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if line_start and c == "#":  # a directive, with its continuation lines
            j = i
            while j < n:
                if text[j] == "\n" and text[j - 1] != "\\":
                    break
                if text.startswith("/*", j):  # a comment may run past the line
                    end = text.find("*/", j + 2)
                    j = n if end < 0 else end + 2
                    continue
                j += 1
            wipe(i, j)
            i = j
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
            continue
        if c == '"':
            m = re.search(r"(?:u8|[uUL])?R$", text[max(0, i - 3):i])
            prev = i - (len(m.group(0)) if m else 0) - 1
            if m and (prev < 0 or not (text[prev].isalnum() or text[prev] == "_")):
                # A raw string: R"delim( ... )delim".
                paren = text.find("(", i + 1)
                delim = text[i + 1:paren]
                end = text.find(")" + delim + '"', paren + 1)
                end = n if end < 0 else end + len(delim) + 1
                wipe(i + 1, end)
                i = end + 1
                continue
            i = skip_quoted(text, i, '"', wipe)
            continue
        if c == "'":
            # A digit separator (1'000, 0xffff'ffff) is inside a number: the
            # token it ends starts with a digit. A character literal's
            # prefix (u8, u, U, L) starts with a letter.
            j = i
            while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_.'"):
                j -= 1
            if j < i and text[j].isdigit():
                i += 1
                continue
            i = skip_quoted(text, i, "'", wipe)
            continue
        i += 1
    return "".join(out)


def skip_quoted(text, i, quote, wipe):
    """Blanks the literal opened by the quote at i; returns the index past it."""
    j = i + 1
    n = len(text)
    while j < n and text[j] != quote and text[j] != "\n":
        j += 2 if text[j] == "\\" else 1
    wipe(i + 1, min(j, n))
    return j + 1


def matching(text, i):
    """The index of the brace closing the one at i (len(text) if none)."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text)


def spaces(m):
    """A match's text as spaces (its newlines kept): offsets stay."""
    return re.sub(r"[^\n]", " ", m.group(0))


def strip_prefixes(header):
    """The header with its access specifiers, attributes and template
    parameter lists blanked (they would look like a constructor's
    initializer list or hide a `=` in brackets); offsets stay."""
    h = header
    while True:
        before = h
        h = re.sub(r"^\s*(public|private|protected)\s*:(?!:)", spaces, h)
        h = re.sub(r"^\s*\[\[.*?\]\]", spaces, h, flags=re.S)
        m = re.match(r"\s*template\s*<", h)
        if m:
            depth, j = 1, m.end()
            while j < len(h) and depth:
                depth += {"<": 1, ">": -1}.get(h[j], 0)
                j += 1
            h = re.sub(r"[^\n]", " ", h[:j]) + h[j:]
        if h == before:
            return h


def top_level(header):
    """The header with what is inside (), [] and {} blanked (the brackets
    kept); offsets stay."""
    out, depth = [], 0
    for c in header:
        if c in ")]}":
            depth -= 1
        out.append(c if depth <= 0 or c == "\n" else " ")
        if c in "([{":
            depth += 1
    return "".join(out)


NAME_BEFORE_PAREN = re.compile(
    r"((?:[A-Za-z_]\w*\s*(?:<[^(){};]*>)?\s*::\s*)*~?(?:operator\s*(?:\(\s*\)|[^\s(]+)|[A-Za-z_]\w*))\s*$")
NOT_NAMES = ("decltype", "alignas", "noexcept", "sizeof", "requires", "__attribute__")


def function_name(header):
    """(qualified name, its offset in the header, offset of its parameter
    list) when the header is a function's: a name and a parameter list, no
    `=` outside brackets (an initializer), not an enum or alias; else None."""
    h = strip_prefixes(header)
    if re.match(r"\s*(enum|typedef|using)\b", h):
        return None
    t = top_level(h)
    if re.search(r"(?<![=!<>])=(?!=)", re.sub(r"operator\s*[^\s(]+", "operator", t)):
        return None
    for p in (m.start() for m in re.finditer(r"\(", t)):
        before = h[:p]
        if re.search(r"\boperator\s*$", before):
            continue  # operator()'s own parentheses: its parameters follow
        m = NAME_BEFORE_PAREN.search(before)
        if m and m.group(1) not in NOT_NAMES:
            name = re.sub(r"operator(?=\w)", "operator ", re.sub(r"\s+", "", m.group(1)))
            return name, m.start(1), p
    return None


SCOPE = re.compile(r"\s*(?:(?:inline\s+)?namespace\b|extern\s*\"\s*\"\s*$|(?:class|struct|union)\b)")
CLASS_NAME = re.compile(r"\s*(?:class|struct|union)\s+(?:alignas\s*\([^)]*\)\s*)?([A-Za-z_]\w*)")


def functions(text):
    """(name, first line, last line) of each function at namespace or class
    level of the blanked text."""
    found = []

    def line_of(i):
        return text.count("\n", 0, i) + 1

    def scan(a, b, prefix):
        i = a
        start = a  # where the current declaration's text starts
        while i < b:
            c = text[i]
            if c in ";}":
                i += 1
                start = i
                continue
            if c != "{":
                i += 1
                continue
            header = text[start:i]
            end = matching(text, i)
            h = strip_prefixes(header)
            if SCOPE.match(h):
                m = CLASS_NAME.match(h)
                scan(i + 1, end, prefix + m.group(1) + "::" if m else prefix)
                i = start = end + 1
                continue
            fn = function_name(header)
            if fn is None:
                i = end + 1  # an initializer or an enum: the declaration goes on to its ";"
                continue
            name, name_at, params_at = fn
            # A constructor's member initializer braces (Foo() : a_{1}, b_{2} {)
            # belong to the header: after a lone ":" past the parameters, the
            # body's brace follows a ")" or a "}", an initializer's a name.
            after_params = top_level(h)[params_at:]
            last = header.rstrip()[-1:]
            if re.search(r"(?<!:):(?!:)", after_params) and (last.isalnum() or last in "_>"):
                i = end + 1
                continue
            found.append((prefix + name, line_of(start + name_at), line_of(end)))
            i = start = end + 1

    scan(0, len(text), "")
    return found


# --self-test: what the braces of comments, literals, initializers and
# constructors' member initializers must not hide or fake.
SAMPLE = r"""#include <x>
#define OPEN {
#define M(x) do { x } while (0)
extern "C" {
int c_fn(int a) {
  return a;
}
}
extern "C" int c_fn2(int a) {
  return a;
}
namespace a::b {
namespace {
constexpr long kSep = 1'000'000 + 0xffff'ffff;
const char* s = "}}}{\"{";
char c = '{';
char d = '\'';
const char* r = R"xx(}} )" {{ )xx";
const char* u = u8R"(})";
enum class E : int { kA = 1, kB };
struct P { int x, y; };
constexpr P kArr[] = {{1, 2}, {3, 4}};
P kOne{1, 2};
auto lambda = [](int v) { return v; };
}  // namespace
// a comment with } and {
/* a block
   comment { */
template <class T, class = void>
class Tpl final : public Base<T> {
 public:
  Tpl() : a_{1}, b_(2) {
    x('}');
  }
  int operator()(int v) const { return v; }
  bool operator==(const Tpl& o) const { return a_ == o.a_; }
  int a_{3};
  std::function<void()> f_ = [] { };
 private:
  struct Inner {
    void g() { }
  };
  int b_;
};
std::vector<std::pair<std::string, int>>
Long::multi_line(int a,
                 int b) const {
  const char* x = "{";
  return {};
}
Foo::Foo(int a)
    : base_{a},
      other_(a) {
  y();
}
int Foo::operator()(int) { return 1; }
}  // namespace a::b
TEST_CASE("a { test", "[x]") {
  SECTION("s") { }
}
"""
SAMPLE_FUNCTIONS = [("c_fn", 5, 7), ("c_fn2", 9, 11), ("Tpl::Tpl", 32, 34), ("Tpl::operator()", 35, 35),
                    ("Tpl::operator==", 36, 36), ("Tpl::Inner::g", 41, 41), ("Long::multi_line", 46, 50),
                    ("Foo::Foo", 51, 55), ("Foo::operator()", 56, 56), ("TEST_CASE", 58, 60)]


def self_test():
    got = functions(blank(SAMPLE))
    if got == SAMPLE_FUNCTIONS:
        return 0
    print(f"self-test: found {got}\n           wanted {SAMPLE_FUNCTIONS}", file=sys.stderr)
    return 1


def files_of(paths):
    for p in paths:
        if os.path.isdir(p):
            for f in sorted(os.listdir(p)):
                if f.endswith(EXTENSIONS) and os.path.isfile(os.path.join(p, f)):
                    yield os.path.join(p, f)
        else:
            yield p


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max", type=int, default=80, help="the longest a function may be, in lines (80)")
    ap.add_argument("--self-test", action="store_true", help="check the checker on a built-in sample")
    ap.add_argument("paths", nargs="*", help="C++ files, or directories of them")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    if not args.paths:
        ap.error("no files given")
    over = []
    for f in files_of(args.paths):
        try:
            with open(f, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError as e:
            print(f"{f}: {e.strerror}", file=sys.stderr)
            return 2
        for name, first, last in functions(blank(text)):
            n = last - first + 1
            if n > args.max:
                over.append(f"{f}:{first} {name} {n} lines")
    for o in over:
        print(o)
    if over:
        print(f"{len(over)} function(s) over {args.max} lines", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
