"""The grammar of the kernel spec language (lark, LALR) and the parser that reads a spec into a
syntax tree; syntax errors become diagnostics with line, column and the tokens allowed there.

docs/dsl.md prints GRAMMAR verbatim (a test keeps the two equal)."""
from __future__ import annotations

import functools

from lark import Lark, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from formloop.dsl.diagnostics import Diagnostic, SpecError

GRAMMAR = r"""
start      : _NL? (statement (_NL statement)*)? _NL?
statement  : kernel | pipeline
kernel     : "kernel" NAME "=" NAME block chain?
block      : "{" _NL? (item (_NL item)*)? _NL? "}"
item       : NAME "=" value
chain      : (CHAIN call)+
call       : NAME ("(" [arg ("," arg)*] ")")?
arg        : value                      -> positional
           | NAME "=" value             -> keyword
pipeline   : NAME "=" "pipeline" "(" _NL? call ("," _NL? call)* _NL? ")"
value      : OPEN                       -> open
           | DIMS                       -> dims
           | NUMBER                     -> number
           | NAME+                      -> words

OPEN       : "?"
DIMS.2     : /(\d+|\?)([ \t]*[x\u00d7][ \t]*(\d+|\?))+/
NUMBER     : /[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?/
NAME       : /[A-Za-z_][A-Za-z0-9_]*/
CHAIN.2    : /((\r?\n)[ \t]*(#[^\n]*)?)*[ \t]*>>/
_NL        : /((\r?\n|;)[ \t]*(#[^\n]*)?)+/
COMMENT    : /#[^\n]*/
%ignore /[ \t]+/
%ignore COMMENT
""".strip("\n")

_TOKEN_TEXT = {"NAME": "a name", "NUMBER": "a number", "DIMS": "dimensions like 128 x 128 x 64", "OPEN": "?",
               "CHAIN": ">>", "_NL": "a new line or ;", "LBRACE": "{", "RBRACE": "}", "LPAR": "(", "RPAR": ")",
               "EQUAL": "=", "COMMA": ",", "KERNEL": "kernel", "PIPELINE": "pipeline",
               "$END": "the end of the file"}


@functools.lru_cache(maxsize=1)
def parser() -> Lark:
    return Lark(GRAMMAR, parser="lalr", propagate_positions=True, maybe_placeholders=False)


def parse_tree(text: str, source: str = "<spec>") -> Tree:
    """The syntax tree of `text`; a syntax error raises SpecError naming where and what is allowed."""
    try:
        return parser().parse(text)
    except UnexpectedInput as exc:
        raise SpecError(source, [_syntax_diagnostic(exc, text)]) from None


def _syntax_diagnostic(exc: UnexpectedInput, text: str) -> Diagnostic:
    if isinstance(exc, UnexpectedEOF):
        lines = text.splitlines() or [""]
        return Diagnostic(len(lines), len(lines[-1]) + 1, "syntax", "end of file", _expected(exc.expected),
                          "the spec ends too early")
    if isinstance(exc, UnexpectedToken):
        found = {"_NL": "a new line", "$END": "end of file"}.get(exc.token.type) or str(exc.token).strip()
        try:  # what the parser in this very state accepts (LALR merges states, so `expected` is wider)
            allowed = exc.interactive_parser.accepts()
        except Exception:  # noqa: BLE001 - fall back to the state's lookahead set
            allowed = exc.expected
        line, column = exc.line, exc.column
        if exc.token.type == "CHAIN":  # the token carries the line breaks before it: point at '>>'
            line, column = exc.token.end_line, exc.token.end_column - 2
        return Diagnostic(line, column, "syntax", found or exc.token.type, _expected(allowed), "unexpected token")
    if isinstance(exc, UnexpectedCharacters):
        return Diagnostic(exc.line, exc.column, "syntax", text[exc.pos_in_stream], _expected(exc.allowed or ()),
                          "unexpected character")
    return Diagnostic(getattr(exc, "line", 1), getattr(exc, "column", 1), "syntax", "?", "a valid spec", str(exc))


def _expected(names) -> str:
    shown = sorted({_TOKEN_TEXT.get(n, n.strip('"').lower()) for n in names if not n.startswith("__")})
    return ", ".join(shown) if shown else "nothing more"
