#!/usr/bin/env bash
# build-scrontab.sh OUTDIR — build the `scrontab` client for the installed Slurm into OUTDIR.
#
# Debian bookworm's slurm-client (22.05) does not ship scrontab (Debian added it with 23.02), but
# slurmctld supports it (ScronParameters=enable). This builds it from Debian's own source package
# for exactly the installed slurm-client version, linked against the installed libslurmfull, in
# about 20 s (configure ~18 s, compile ~1 s). A private apt source list and cache are used, so the
# system's apt configuration is untouched. Needs gcc, binutils and dpkg-dev, and network access to
# deb.debian.org. .ci/run calls it as: bash tests/tools/build-scrontab.sh .cache/slurm-bin
set -euo pipefail
if [ $# -ne 1 ]; then echo "usage: $0 OUTDIR" >&2; exit 2; fi
OUT=$(realpath -m "$1")
if [ -x "$OUT/scrontab" ]; then echo "$OUT/scrontab already built"; exit 0; fi
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
VER=$(dpkg-query -W -f='${Version}' slurm-client)
LIB=/usr/lib/x86_64-linux-gnu/slurm-wlm
[ -e "$LIB/libslurmfull.so" ] || LIB=$(dirname "$(find /usr/lib -name 'libslurmfull.so' -print -quit)")
mkdir -p "$W/lists/partial" "$W/cache/archives/partial" "$OUT"
printf 'deb-src http://deb.debian.org/debian bookworm main\ndeb-src http://deb.debian.org/debian-security bookworm-security main\n' > "$W/src.list"
A=(-o APT::Sandbox::User=root -o Dir::Etc::SourceList="$W/src.list" -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists="$W/lists" -o Dir::Cache="$W/cache")
apt-get "${A[@]}" -qq update
cd "$W" && apt-get "${A[@]}" -qq source --download-only "slurm-wlm=$VER" 2>/dev/null
dpkg-source -x --no-check slurm-wlm_*.dsc src >/dev/null
# configure prints ~30 warnings about optional libraries scrontab does not need: show them only on failure
cd src && ./configure -q --sysconfdir=/etc/slurm --disable-debug --without-rpath --prefix=/usr \
    >"$W/configure.log" 2>&1 || { tail -40 "$W/configure.log" >&2; exit 1; }
cd src/scrontab
# scrontab embeds its default crontab and usage text as binary objects
for t in default_crontab usage; do
  ld -r -o $t.bino -z noexecstack --format=binary $t.txt
  objcopy --rename-section .data=.rodata,alloc,load,readonly,data,contents $t.bino
done
gcc -O2 -DHAVE_CONFIG_H -I../.. -I../../slurm env.c opt.c parse.c scrontab.c default_crontab.bino usage.bino \
    -L"$LIB" -lslurmfull -Wl,-rpath,"$LIB" -Wl,--export-dynamic -o "$OUT/scrontab.tmp"
mv "$OUT/scrontab.tmp" "$OUT/scrontab"   # never leave a half-written binary behind
echo "built $OUT/scrontab for slurm-client $VER"
