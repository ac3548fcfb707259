#!/usr/bin/env bash
# Render what people receive and see as pictures, to look at before calling
# a document or page done (issue 18, item 5): the demo's October statement of
# PAS1234 as HTML (screenshot by headless Chromium) and as PDF (pages by
# pdftoppm), and the web view's two main pages fetched from `serve` over
# HTTP (the billing office's project list, PAS1234's page as its token sees
# it), into docs/images/ (the README shows them).
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
# The web view: serve on a free port, the billing office's token and a
# project token, the pages saved as fetched (they need nothing else).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
HPC_LEDGER_WEB_TOKEN=look-billing "$bin" --database-url "$url" serve --listen "127.0.0.1:$port" \
    > "$home/serve.log" 2>&1 &
serve=$!
trap 'kill $serve 2>/dev/null || true; HPC_LEDGER_HOME=$home "$bin" db stop >/dev/null 2>&1 || true; rm -rf "$home"' EXIT
token=$("$bin" --database-url "$url" access grant --project PAS1234 --days 1 --note "pictures" 2>/dev/null)
for _ in $(seq 50); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done
curl -fsS -H "Authorization: Bearer look-billing" "http://127.0.0.1:$port/ui?month=2026-10" > "$home/projects.html"
curl -fsS -u "pi:$token" "http://127.0.0.1:$port/ui/projects/PAS1234?month=2026-10" > "$home/project.html"
chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280x640 \
    --screenshot="$out/web-projects.png" "file://$home/projects.html" 2>/dev/null
chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280x2500 \
    --screenshot="$out/web-project.png" "file://$home/project.html" 2>/dev/null
ls -l "$out"/statement-html.png "$out"/statement-pdf-page1.png "$out"/web-projects.png "$out"/web-project.png
