#!/usr/bin/env bash
# Run a command the way the chart runs the vLLM container: the machine's root filesystem read-only, writable only
# where volumes are mounted, as a given UID/GID with no capabilities and no new privileges. For the tests only
# (tests/security/test_readonly_root.py); needs root, and runs inside `unshare --mount --propagation private`, so
# nothing it mounts is seen outside.
#   pod_sandbox.sh NEWROOT MOUNTS UID:GID COMMAND...
# NEWROOT: an empty directory; MOUNTS: lines "ro|rw SOURCE TARGET" (rw = a volume; ro = a path of the "image" that
# lives where the sandbox hides the host: /home, /root, /tmp).
set -euo pipefail
root=$1 mounts=$2 ids=$3
shift 3
mount --make-rprivate /
mount -t tmpfs -o mode=0755,size=16m pod-root "$root"
for entry in /*; do
	name=${entry#/}
	case $name in proc | sys | dev | tmp | home | root | lost+found) continue ;; esac
	if [[ -L $entry ]]; then
		ln -s "$(readlink "$entry")" "$root/$name"
	elif [[ -d $entry ]]; then
		mkdir "$root/$name"
		mount --bind "$entry" "$root/$name"
		mount -o remount,bind,ro "$root/$name"
	fi
done
# /dev keeps the host's /dev/shm (the chart's memory emptyDir), /proc and /sys what a container has.
for name in proc sys dev; do
	mkdir "$root/$name"
	mount --rbind "/$name" "$root/$name"
done
while read -r mode source target; do
	mkdir -p "$root$target"
	mount --bind "$source" "$root$target"
	if [[ $mode == ro ]]; then mount -o remount,bind,ro "$root$target"; fi
done <"$mounts"
mount -o remount,ro "$root"
exec chroot "$root" setpriv --reuid="${ids%:*}" --regid="${ids#*:}" --groups="${ids#*:}" --inh-caps=-all \
	--bounding-set=-all --no-new-privs --pdeathsig=TERM -- "$@"
