#!/usr/bin/env bash
# Render what people receive as pictures, to look at before calling a
# document done (issue 18, item 5): the demo's October statement of PAS1234
# as HTML (screenshot by headless Chromium) and as PDF (pages by pdftoppm),
# into docs/images/ (the README shows them).
#
#   tests/look/documents.sh [OUT_DIR]        default: docs/images
#
# Needs Debian's chromium and poppler-utils (installed when missing, as
# root). Uses a scratch ledger home of its own and stops its database after.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-docs/images}
mkdir -p "$out"
need() { command -v "$1" >/dev/null 2>&1 || apt-get install -y -q "$2" >/dev/null; }
need chromium chromium
need pdftoppm poppler-utils
cargo build --release -q
bin=$PWD/target/release/hpc-ledger
home=$(mktemp -d /tmp/hl-look.XXXXXX)
chmod 755 "$home"
trap 'HPC_LEDGER_HOME=$home "$bin" db stop >/dev/null 2>&1 || true; rm -rf "$home"' EXIT
export HPC_LEDGER_HOME=$home
"$bin" demo >/dev/null
url=$("$bin" db url | sed 's/hpc_ledger?/hpc_ledger_demo?/')
"$bin" --database-url "$url" statement --project PAS1234 --month 2026-10 --format html > "$home/statement.html"
"$bin" --database-url "$url" statement --project PAS1234 --month 2026-10 --format pdf > "$home/statement.pdf"
chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280x1960 \
    --screenshot="$out/statement-html.png" "file://$home/statement.html" 2>/dev/null
pdftoppm -r 100 -png -f 1 -l 1 "$home/statement.pdf" "$home/page"
cp "$home"/page-1.png "$out/statement-pdf-page1.png"
ls -l "$out"/statement-html.png "$out"/statement-pdf-page1.png
