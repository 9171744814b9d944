#!/usr/bin/env bash
# Sets up what tests/windows.rs needs, for `make test-windows`: the Windows
# build of the plugin (x86_64-pc-windows-gnu, with Debian's mingw-w64; the
# dev profile, the same code as the release without its LTO build, which
# took CI six minutes; `make release` builds and checks the release .exe)
# and a Wine prefix of the tests' own, holding the one shim
# Debian bookworm's Wine 8.0 lacks (tests/windows/processprng-shim.c),
# and a stand-in for AKS's kubelet service (tests/windows/kubelet-service.c).
# Prints the two variables the tests read, for the Makefile to export.
# `.ci/run` installs mingw-w64, wine64 and the Rust target.
set -euo pipefail
cd "$(dirname "$0")/../.."

target=x86_64-pc-windows-gnu
wine=${WICP_WINE:-/usr/lib/wine/wine64}
[ -x "$wine" ] || { echo "make test-windows needs Wine: apt-get install wine64" >&2; exit 1; }
command -v x86_64-w64-mingw32-gcc >/dev/null ||
  { echo "make test-windows needs mingw-w64: apt-get install mingw-w64" >&2; exit 1; }

cargo build --locked --target "$target" --bin wi-credential-provider >&2
dir=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
# Without its debug sections (276 MB to 45 MB): node install copies the
# binary it runs from, and refuses one over 256 MiB.
exe="$dir/windows-test/wi-credential-provider.exe"
mkdir -p "$dir/windows-test"
x86_64-w64-mingw32-strip -o "$exe" "$dir/$target/debug/wi-credential-provider.exe"

prefix="$dir/wine-prefix"
shim="$prefix/drive_c/windows/system32/bcryptprimitives.dll"
if [ ! -f "$prefix/system.reg" ]; then
  rm -rf "$prefix"
  WINEPREFIX="$prefix" WINEDEBUG=-all "$wine" wineboot --init >/dev/null 2>&1
  # wineboot returns while the new prefix is still being set up; until its
  # wineserver has finished, a service created with sc.exe is lost (the
  # node-install restart test creates one).
  WINEPREFIX="$prefix" "$(dirname "$wine")/wineserver" -w
fi
x86_64-w64-mingw32-gcc -shared -O2 -o "$dir/bcryptprimitives.dll" \
  tests/windows/processprng-shim.c tests/windows/processprng-shim.def -ladvapi32
install -m 0644 "$dir/bcryptprimitives.dll" "$shim"
# The stand-in for AKS's NSSM `Kubelet` service (node install --restart-kubelet).
x86_64-w64-mingw32-gcc -O2 -o "$dir/kubelet-service.exe" tests/windows/kubelet-service.c -ladvapi32
WINEPREFIX="$prefix" WINEDEBUG=-all "$wine" "$exe" --version >/dev/null ||
  { echo "the Windows build does not start under Wine" >&2; exit 1; }
echo "WICP_WINDOWS_EXE=$exe"
echo "WINEPREFIX=$prefix"
echo "WICP_KUBELET_SERVICE_EXE=$dir/kubelet-service.exe"
