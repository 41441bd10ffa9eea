#!/usr/bin/env bash
# sshd-up.sh - run a private OpenSSH server on 127.0.0.1 for the test suite: its own host key,
# its own client key and authorized_keys, a known_hosts file holding the real host key (so
# clients can check it strictly), a dedicated login user. /etc/ssh is never read or changed and
# no system sshd is started. Idempotent.
#
# Env: NESTBOX_SVC_RUN (default /run/nestbox-test), NESTBOX_SSH_USER (default nestbox-ssh;
#      created when missing, removed by sshd-down.sh), NESTBOX_SSH_PORT (default: the first
#      free port from 22122).
# Prints (and writes to $NESTBOX_SVC_RUN/sshd.env) the NESTBOX_TEST_SSH_* variables.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
dir=$NESTBOX_SVC_RUN/sshd
user=${NESTBOX_SSH_USER:-nestbox-ssh}
pidfile=$dir/sshd.pid
envfile=$NESTBOX_SVC_RUN/sshd.env

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if pid_alive "$pidfile" && [ -f "$envfile" ] && [ -f "$dir/port" ] && listening "$(cat "$dir/port")"; then
  cat "$envfile"; exit 0
fi
need_packages openssh-server openssh-client
# sshd insists on its privilege separation directory.
mkdir -p "$dir" /run/sshd
# sshd reads authorized_keys as the login user, who must be able to traverse this directory;
# the private keys inside stay 0600 root.
chmod 711 "$NESTBOX_SVC_RUN" "$dir"

if ! id "$user" >/dev/null 2>&1; then
  useradd --create-home --shell /bin/sh "$user"
  echo "$user" > "$dir/created-user"
fi
# Without PAM, sshd treats a password field starting with '!' (what useradd writes) as a locked
# account; '*' means "no password" without locking.
if getent shadow "$user" | cut -d: -f2 | grep -q '^!'; then usermod -p '*' "$user"; fi

port=${NESTBOX_SSH_PORT:-$(free_port 22122)}
echo "$port" > "$dir/port"
[ -f "$dir/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C nestbox-test-host -f "$dir/host_ed25519"
[ -f "$dir/client_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C nestbox-test-client -f "$dir/client_ed25519"
install -m 644 "$dir/client_ed25519.pub" "$dir/authorized_keys"
echo "[127.0.0.1]:$port $(cut -d' ' -f1,2 "$dir/host_ed25519.pub")" > "$dir/known_hosts"

cat > "$dir/sshd_config" <<CONF
ListenAddress 127.0.0.1
Port $port
HostKey $dir/host_ed25519
PidFile none
AuthorizedKeysFile $dir/authorized_keys
AllowUsers $user
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
# the key files live in a directory sshd's StrictModes would reject
StrictModes no
UsePAM no
PrintMotd no
UseDNS no
MaxSessions 64
MaxStartups 64:30:128
LogLevel VERBOSE
CONF
/usr/sbin/sshd -t -f "$dir/sshd_config"

# -D: stay in the foreground so $! is sshd itself; -E: its log.
setsid /usr/sbin/sshd -D -f "$dir/sshd_config" -E "$dir/sshd.log" </dev/null >>"$dir/sshd.out" 2>&1 &
echo $! > "$pidfile"
if ! wait_until "$pidfile" 50 listening "$port"; then
  tail -20 "$dir/sshd.log" >&2; die "sshd did not listen on 127.0.0.1:$port"
fi
if ! ssh -F /dev/null -p "$port" -i "$dir/client_ed25519" -o IdentitiesOnly=yes -o BatchMode=yes \
     -o StrictHostKeyChecking=yes -o UserKnownHostsFile="$dir/known_hosts" -o ConnectTimeout=5 \
     "$user@127.0.0.1" true; then
  tail -20 "$dir/sshd.log" >&2; die "sshd on 127.0.0.1:$port refused the test key"
fi
cat > "$envfile" <<ENV
export NESTBOX_TEST_SSH_HOST=127.0.0.1
export NESTBOX_TEST_SSH_PORT=$port
export NESTBOX_TEST_SSH_USER=$user
export NESTBOX_TEST_SSH_KEY=$dir/client_ed25519
export NESTBOX_TEST_SSH_KNOWN_HOSTS=$dir/known_hosts
ENV
cat "$envfile"
