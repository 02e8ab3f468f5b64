"""The specification: what a compiled Program does, exactly (docs/semantics.md).

`reference` runs a Program over a byte stream, and every backend must give its events and
verdicts bit for bit; `lexing` (the lexer and the anchor hashes) and `numbers` (a lexeme's
float64 value) are the parts the compiler shares with it, so build time and run time agree;
`state` writes and reads a machine's fixed-size state record.
"""
