#!/usr/bin/env bash
# Prints the environment that builds and runs the nixl backend against an
# installed NIXL (eval "$(agent/transfer/nixl-env.sh)"), or says why there
# is none and exits 1.
#
#   NIXL_PREFIX set:      that installation (headers in include/, libraries
#                         in lib/x86_64-linux-gnu, lib64 or lib, the UCX
#                         plugin in their plugins/)
#   pkg-config nixl:      the installation its nixl.pc describes
#   otherwise:            NIXL v1.4.0 with UCX from ../shared/third_party/nixl,
#                         installed into the user cache on first use
#                         (NIXL_INSTALL names another installer)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
installer=${NIXL_INSTALL:-$top/../shared/third_party/nixl/install.sh}

# print_env prints the environment of a NIXL whose libraries are in $1, built
# with the C preprocessor flags $2 and linker flags $3.
print_env() {
  cat <<ENV
export NIXL_PLUGIN_DIR="\${NIXL_PLUGIN_DIR:-$1/plugins}"
export LD_LIBRARY_PATH="$1\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export CGO_CPPFLAGS="$2 \${CGO_CPPFLAGS:-}"
export CGO_LDFLAGS="$3 -lnixl_build -Wl,-rpath,$1 \${CGO_LDFLAGS:-}"
export UCX_TLS="\${UCX_TLS:-tcp,self}"
ENV
}

if [ -n "${NIXL_PREFIX:-}" ]; then
  [ -f "$NIXL_PREFIX/include/nixl.h" ] || { echo "NIXL_PREFIX=$NIXL_PREFIX has no include/nixl.h" >&2; exit 1; }
  lib=""
  for d in lib/x86_64-linux-gnu lib/aarch64-linux-gnu lib64 lib; do
    if [ -e "$NIXL_PREFIX/$d/libnixl.so" ]; then lib=$NIXL_PREFIX/$d; break; fi
  done
  [ -n "$lib" ] || { echo "NIXL_PREFIX=$NIXL_PREFIX has no libnixl.so under lib/" >&2; exit 1; }
  echo "export NIXL_PREFIX=\"$NIXL_PREFIX\""
  print_env "$lib" "-I$NIXL_PREFIX/include" "-L$lib -lnixl"
  exit 0
fi
if command -v pkg-config >/dev/null 2>&1 && pkg-config --exists nixl 2>/dev/null; then
  lib=$(pkg-config --variable=libdir nixl)
  [ -e "$lib/libnixl.so" ] || { echo "pkg-config nixl names libdir $lib, which has no libnixl.so" >&2; exit 1; }
  print_env "$lib" "$(pkg-config --cflags nixl)" "$(pkg-config --libs nixl)"
  exit 0
fi
if [ -x "$installer" ]; then
  "$installer" >&2
  "$installer" --env
  exit 0
fi
echo "no NIXL: set NIXL_PREFIX to an installed NIXL, or check kvscope out next to shared/ (its third_party/nixl installs NIXL v1.4.0 with UCX)" >&2
exit 1
