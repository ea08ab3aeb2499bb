#!/bin/bash
# The apptainer stand-in's container (tests/shims/apptainer, with APPTAINER_STANDIN_HIDE set), run as
# root under `unshare --mount --propagation private`: BINDS PWD COMMAND... runs COMMAND in DIR with
# what an image shows of the host: a /tmp of its own, an empty folder over each of APPTAINER_STANDIN_HIDE
# (colon-separated: what the image lacks, as the host's slurmgen), and BINDS (apptainer's
# SRC[:DST[:ro]],...) mounted back on top. What is not bound is out of the host's sight, and the
# other way round, as in a real image.
set -euo pipefail
binds=$1 pwd=$2
shift 2
stage=/run/slurmgen-apptainer-standin  # each namespace mounts its own tmpfs here: nothing is shared
mkdir -p "$stage"
mount -t tmpfs standin "$stage"
IFS=, read -ra specs <<< "$binds"
for i in "${!specs[@]}"; do  # the sources first: the hiding below covers some of them
    src=${specs[i]%%:*}
    mkdir "$stage/$i"
    mount --rbind "$src" "$stage/$i"  # a missing source fails, as apptainer fails
done
mount -t tmpfs tmp /tmp
IFS=: read -ra hidden <<< "${APPTAINER_STANDIN_HIDE:-}"
for dir in "${hidden[@]}"; do
    [[ -z $dir ]] || mount -t tmpfs hidden "$dir"
done
for i in "${!specs[@]}"; do
    IFS=: read -r src dst mode <<< "${specs[i]}"
    dst=${dst:-$src}
    mkdir -p "$dst"
    mount --rbind "$stage/$i" "$dst"
    [[ ${mode:-} != ro ]] || mount -o remount,bind,ro "$dst"
done
cd "$pwd"
exec "$@"
