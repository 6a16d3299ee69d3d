#!/bin/sh
# mail-user add USER [PASSWORD]: adds a mail user (or sets its password) in the mail image; it can
# log in at once. Prints the password (a random one when none is given).
#   podman compose exec mail mail-user add alice@postern.test
set -eu
USERS_DIR=/var/lib/postern-mail/users.d
[ "${1:-}" = add ] && [ -n "${2:-}" ] || { echo "usage: mail-user add USER [PASSWORD]" >&2; exit 2; }
# Dovecot looks users up lowercased, one passwd-file each (docker/dovecot/dovecot.conf).
user=$(printf '%s' "$2" | tr 'A-Z' 'a-z')
case "$user" in
  */* | .* | *[!a-z0-9@._+-]* | *@*@* | [!a-z0-9]*@* ) echo "mail-user: not a usable address: $2" >&2; exit 2 ;;
  *@*.*) ;;
  *) echo "mail-user: not a usable address: $2" >&2; exit 2 ;;
esac
password=${3:-$(openssl rand -base64 18)}
mkdir -p "$USERS_DIR"
tmp="$USERS_DIR/.$user.$$"
printf '%s:%s::::::\n' "$user" "$(doveadm pw -s PBKDF2 -p "$password")" > "$tmp"
chgrp dovecot "$tmp" && chmod 0640 "$tmp" && mv "$tmp" "$USERS_DIR/$user"
[ -n "${3:-}" ] || echo "$password"
