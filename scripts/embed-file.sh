#!/bin/sh
# embed-file.sh OUT.c NAME FILE — a file's bytes as a C array NAME (NUL
# appended, not counted) and its length NAME_len, so that a page the daemon
# serves (src/admin_ui.html) stays a readable file in the tree and no copy
# of it is pasted by hand.
set -eu
out=$1; name=$2; file=$3
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
len=$(wc -c < "$file" | tr -d ' ')
{
  printf '/* %s: generated from %s by scripts/embed-file.sh. DO NOT EDIT. */\n' \
    "$(basename "$out")" "$(basename "$file")"
  printf 'extern const char %s[];\n' "$name"
  printf 'extern const unsigned long %s_len;\n' "$name"
  printf 'const char %s[] = {\n' "$name"
  od -An -v -tx1 "$file" | sed -e 's/ *$//' -e 's/^ *//' -e 's/ \{1,\}/, 0x/g' -e 's/^/0x/' -e 's/$/,/'
  printf '0x00};\n'
  printf 'const unsigned long %s_len = %sUL;\n' "$name" "$len"
} > "$tmp"
mv "$tmp" "$out"
trap - EXIT
