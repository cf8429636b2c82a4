#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages arbor needs to build, test and benchmark, if missing.
# Idempotent: when everything is present it only checks and exits. Uses apt-get as root, or
# through sudo otherwise.
#
# Arguments add optional groups that only some targets need:
#   windows  mingw-w64 cross compiler, wine64, googletest sources (make windows-test)
#   darwin   libc++ and musl headers, stand-ins for the macOS SDK and FreeBSD's headers
#            (make darwin-check; it also reads the spdlog and OpenSSL headers installed above)
set -euo pipefail

packages=(
  g++ cmake ninja-build ccache make     # toolchain
  clang                                 # the second supported compiler
  pkg-config liburing-dev libspdlog-dev # io engines, logging
  libgtest-dev                          # tests
  libboost-dev                          # Boost.Asio baselines in perf/
  rapidjson-dev                         # the HTTP example's JSON serializer
  libssl-dev openssl                    # tls/ (OpenSSL 3); its tests make certificates
  curl wrk                              # HTTP integration tests (real clients, wrk smoke run)
  nginx-light gnuplot-nox               # perf/http: the nginx baseline, the chart
  nghttp2-client                        # perf/http: h2load times pipelined requests
  apache2-utils                         # perf/http/churn: ab, a connection per request
  spin                                  # make model: the park/notify handshake (Promela)
  python3                               # make audit: scripts/gcc12-coroutine-audit
)

for group in "$@"; do
  case "$group" in
    windows) packages+=(g++-mingw-w64-x86-64-posix wine64 googletest) ;;
    darwin) packages+=(clang libc++-dev musl-dev) ;;
    *) echo "install-deps: unknown group '$group' (windows, darwin)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
