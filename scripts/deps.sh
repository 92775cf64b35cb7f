#!/usr/bin/env bash
# Installs the Debian packages delta needs.
#   scripts/deps.sh install   install every package (apt-get, as root)
#   scripts/deps.sh ensure    install only what is missing; quiet when all
#                             is there (make test and make run call this)
#   scripts/deps.sh bench     also the benchmark's reference (python3-torch)
#   scripts/deps.sh fuzz      also clang and libFuzzer's runtime (make fuzz)
# Not root: prints the command to run instead and fails if something needed
# is missing.
set -u
REQUIRED="gcc make libopenblas-dev libopenblas0-openmp libcjson-dev zlib1g-dev libpcre2-dev pkg-config libopenmpi-dev openmpi-bin"
OPTIONAL="dataset-fashion-mnist gnuplot-nox"
BENCH="python3-torch python3-torchvision"
FUZZ="clang-14 libclang-rt-14-dev"

mode=${1:-install}
case "$mode" in
install) want="$REQUIRED $OPTIONAL" ;;
ensure) want="$REQUIRED $OPTIONAL" ;;
bench) want="$REQUIRED $OPTIONAL $BENCH" ;;
fuzz) want="$REQUIRED $OPTIONAL $FUZZ" ;;
*) echo "usage: $0 install|ensure|bench|fuzz" >&2; exit 2 ;;
esac

missing=""
for p in $want; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && { [ "$mode" = ensure ] || [ "$mode" = fuzz ] || echo "deps: all installed"; exit 0; }

if [ "$(id -u)" != 0 ]; then
    echo "deps: missing:$missing" >&2
    echo "deps: run: sudo apt-get install -y$missing" >&2
    # Only the required ones stop the build.
    for p in $REQUIRED $([ "$mode" = fuzz ] && echo "$FUZZ"); do
        case " $missing " in *" $p "*) exit 1 ;; esac
    done
    exit 0
fi
echo "deps: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q $missing >/tmp/delta-deps.log 2>&1 || {
    apt-get update -q >>/tmp/delta-deps.log 2>&1
    apt-get install -y -q $missing >>/tmp/delta-deps.log 2>&1
} || {
    tail -20 /tmp/delta-deps.log >&2
    for p in $REQUIRED $([ "$mode" = fuzz ] && echo "$FUZZ"); do
        case " $missing " in *" $p "*)
            echo "deps: could not install $p (log: /tmp/delta-deps.log)" >&2
            exit 1 ;;
        esac
    done
    echo "deps: optional packages could not be installed; going on" >&2
}
exit 0
