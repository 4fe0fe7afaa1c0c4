#!/usr/bin/env bash
# Fit the checkout into a lent GPU machine's copy limit (64 MiB with the carried .gpu/ folder: 62.5 MB of it is
# CIFAR-10 and the MLflow bundle), and put it back afterwards.
#
#   bash harness/device_copy.sh trim       # before the device call: only what runs stays in the copy
#   bash harness/device_copy.sh size       # what the copy would hold now, against the limit
#   bash harness/device_copy.sh restore    # after it: the index, the excludes and the trimmed files as committed
#
# The device copies tracked files and untracked files git does not ignore, so leaving the index is not enough:
# `trim` takes the run records and plots (method_cards/), the tests and the notes out of the index *and*
# excludes them (.git/info/exclude, between markers), and cuts every README.md and card.md (the packages'
# metadata names them, so they must exist) to one line. It refuses a tree with uncommitted changes, because
# `restore` checks those files out again. 2026-11-28: 4.25 MB tracked -> 1.7 MB; with .gpu/, 64.1 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=$((64 * 1024 * 1024))
EXCLUDE=.git/info/exclude
BEGIN="# device_copy.sh trim: begin"
END="# device_copy.sh trim: end"

dropped() {  # tracked files the device does not need to run the harness
  git ls-files | grep -E '^method_cards/|(^|/)tests/|\.md$|/shipped_tokenizers/' | grep -vE '(^|/)(README|card)\.md$' || true
}

copy_size() {  # bytes the device would copy: tracked and untracked-not-ignored files, and .gpu/ if present
  local listed carried=0
  listed=$({ git ls-files; git ls-files --others --exclude-standard; } | sort -u | while IFS= read -r f; do
    [[ -f $f ]] && stat -c %s "$f"; done | awk '{s += $1} END {print s + 0}')
  [[ -d .gpu ]] && carried=$(du -sb .gpu | cut -f1)
  echo $((listed + carried))
}

report() {
  local size
  size=$(copy_size)
  awk -v size="$size" -v limit="$LIMIT" -v gpu="$([[ -d .gpu ]] && echo ", .gpu/")" 'BEGIN {
    printf "device copy: %.1f MB (tracked and untracked files%s) of the %.1f MB limit: %s\n", size / 1e6, gpu,
      limit / 1e6, (size <= limit ? "fits" : "too large") }'
}

case "${1:-}" in
  trim)
    if grep -qF "$BEGIN" "$EXCLUDE" 2>/dev/null; then echo "already trimmed: run 'restore' first" >&2; exit 1; fi
    if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
      echo "uncommitted changes: commit them first (restore checks the trimmed files out again)" >&2; exit 1
    fi
    mapfile -t files < <(dropped)
    ((${#files[@]})) && printf '%s\0' "${files[@]}" | xargs -0 git rm -q --cached --
    mkdir -p "$(dirname "$EXCLUDE")"
    { echo "$BEGIN"; printf '/%s\n' "${files[@]}"; echo "$END"; } >> "$EXCLUDE"
    git ls-files | grep -E '(^|/)(README|card)\.md$' | while IFS= read -r f; do
      echo "# $(basename "$f") (trimmed for a device copy; harness/device_copy.sh restore)" > "$f"; done
    echo "trimmed: ${#files[@]} files out of the copy, every README.md and card.md cut to one line"
    report
    ;;
  restore)
    git reset -q
    if [[ -f $EXCLUDE ]]; then sed -i "/^$BEGIN\$/,/^$END\$/d" "$EXCLUDE"; fi
    git checkout -- $(git ls-files | grep -E '(^|/)(README|card)\.md$')
    echo "restored: $(git status --porcelain --untracked-files=no | wc -l) tracked files differ from HEAD"
    ;;
  size) report ;;
  *) echo "usage: bash harness/device_copy.sh trim|restore|size" >&2; exit 2 ;;
esac
