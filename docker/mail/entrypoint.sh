#!/bin/sh
# The mail image's start: renders docker/dovecot and docker/postfix for this container, then runs
# Dovecot and Postfix (Postfix in the foreground; both log to the container's output).
#
# Environment (defaults in brackets):
#   MAIL_DOMAIN [postern.test]           the domain this server receives mail for
#   POSTERN_INGRESS [postern:2424]       host:port of Postern's LMTP ingress, where Postfix delivers
#                                        all of MAIL_DOMAIN (docs/ingress.md), then more host:port to
#                                        try when it is unreachable (replicas); empty: straight to Dovecot
#   POSTERN_HINT_URL [http://postern:8790/hints]  where Dovecot's push hints go (POSTERN_HINT_LISTEN)
#   POSTERN_HINT_SECRET                  their shared secret (16+ characters); empty: no push hints
#   POSTERN_IMAP_MASTER_USER [postern-master], POSTERN_IMAP_MASTER_PASSWORD (required): Postern's login
#   MAIL_USERS                           "user:password user:password ...": users made at every start
#   RELAYHOST                            where other domains' mail goes ([host]:port); empty: their MX
#   MYNETWORKS [127.0.0.0/8]             clients that may relay without logging in
set -eu

DATA=/var/lib/postern-mail
TEMPLATES=/usr/share/postern-mail
CONF=/etc/postern-mail
: "${MAIL_DOMAIN:=postern.test}"
: "${POSTERN_INGRESS=postern:2424}"
: "${POSTERN_HINT_URL:=http://postern:8790/hints}"
: "${POSTERN_HINT_SECRET:=}"
: "${POSTERN_IMAP_MASTER_USER:=postern-master}"
: "${POSTERN_IMAP_MASTER_PASSWORD:?must be set: the password Postern logs in with as the master user}"
: "${MAIL_USERS:=}"
: "${RELAYHOST:=}"
: "${MYNETWORKS:=127.0.0.0/8}"

# Fills {{NAME}} from the variable T_NAME; a placeholder without a value is an error.
render() {
  awk '{
    while (match($0, /[{][{][A-Z0-9_]+[}][}]/)) {
      k = substr($0, RSTART + 2, RLENGTH - 4)
      if (!(("T_" k) in ENVIRON)) { print "postern-mail: " FILENAME " uses {{" k "}}, which has no value" > "/dev/stderr"; exit 1 }
      $0 = substr($0, 1, RSTART - 1) ENVIRON["T_" k] substr($0, RSTART + RLENGTH)
    }
    print
  }' "$1" > "$2"
}

mkdir -p "$CONF" "$DATA/keys" "$DATA/mail" "$DATA/users.d" /run/dovecot /var/lib/dovecot
chmod 0700 "$DATA/keys"
chown postern-vmail:postern-vmail "$DATA/mail" && chmod 0700 "$DATA/mail"
chgrp dovecot "$DATA/users.d" && chmod 0750 "$DATA/users.d"

# The mail_crypt key pair, made once: losing it makes the stored mail unreadable.
if [ ! -s "$DATA/keys/mail-crypt.key" ]; then
  openssl ecparam -name prime256v1 -genkey -noout | openssl pkey > "$DATA/keys/mail-crypt.key.tmp"
  mv "$DATA/keys/mail-crypt.key.tmp" "$DATA/keys/mail-crypt.key"
fi
[ -s "$DATA/keys/mail-crypt.pub" ] || openssl pkey -in "$DATA/keys/mail-crypt.key" -pubout > "$DATA/keys/mail-crypt.pub"
chmod 0600 "$DATA/keys/"*

printf '%s:%s::::::\n' "$POSTERN_IMAP_MASTER_USER" "$(doveadm pw -s PBKDF2 -p "$POSTERN_IMAP_MASTER_PASSWORD")" > "$CONF/master-users"
chgrp dovecot "$CONF/master-users" && chmod 0640 "$CONF/master-users"
# The Lua script reads the secret from a file; without one the hints go nowhere harmful (Postern's
# sweep still finds every change), so an empty secret just points them at a closed port.
if [ -n "$POSTERN_HINT_SECRET" ]; then push_url=$POSTERN_HINT_URL; else push_url=http://127.0.0.1:9/hints; fi
printf '%s\n' "$POSTERN_HINT_SECRET" > "$CONF/push-secret" && chmod 0644 "$CONF/push-secret"
cp "$TEMPLATES/dovecot/postern-push.lua" "$CONF/postern-push.lua"

export T_BASE_DIR=/run/dovecot T_STATE_DIR=/var/lib/dovecot T_INSTANCE_NAME=postern-mail T_LOG_PATH=/dev/stderr \
  T_LISTEN='*' T_AUTH_FAILURE_DELAY='2 secs' T_AUTH_PENALTY_SOCKET_MODE=0 \
  T_IMAP_PORT=143 T_LMTP_PORT=24 T_SASL_PORT=12345 \
  T_MASTER_USERS_FILE="$CONF/master-users" T_USERS_DIR="$DATA/users.d" \
  T_VMAIL_USER=postern-vmail T_VMAIL_UID="$(id -u postern-vmail)" T_MAIL_ROOT="$DATA/mail" \
  T_CRYPT_PRIVATE_KEY="$DATA/keys/mail-crypt.key" T_CRYPT_PUBLIC_KEY="$DATA/keys/mail-crypt.pub" \
  T_PUSH_LUA_FILE="$CONF/postern-push.lua" T_PUSH_URL="$push_url" T_PUSH_SECRET_FILE="$CONF/push-secret"
render "$TEMPLATES/dovecot/dovecot.conf" "$CONF/dovecot.conf"

# Every MAIL_DOMAIN address goes through the ingress (a deployment's wiring, docs/ingress.md):
# the template's direct domain and ingress domain are the same one here.
# shellcheck disable=SC2086 # split on purpose: the first ingress, then the fallbacks
set -- $POSTERN_INGRESS
if [ $# -gt 0 ]; then ingress_host=${1%:*} ingress_port=${1##*:}; shift; else ingress_host=127.0.0.1 ingress_port=24; fi
fallbacks=$*
printf '/^(.+)$/ ${1}\n' > "$CONF/sender-self.regexp"
export T_QUEUE_DIR=/var/spool/postfix T_DATA_DIR=/var/lib/postfix T_SYSLOG_NAME=postfix \
  T_MAILLOG_FILE=/dev/stdout T_MAILLOG_PREFIX=/dev/stdout T_MYHOSTNAME="mx.$MAIL_DOMAIN" \
  T_LISTEN=all T_MYNETWORKS="$MYNETWORKS" T_DOMAIN="$MAIL_DOMAIN" T_INGRESS_DOMAIN="$MAIL_DOMAIN" \
  T_LMTP_HOST="$ingress_host" T_LMTP_PORT="$ingress_port" T_INGRESS_HOST="$ingress_host" T_INGRESS_PORT="$ingress_port" \
  T_VIRTUAL_ALIAS_MAPS= T_RELAYHOST="$RELAYHOST" T_RETRY_DELAY=5s T_MAX_BACKOFF=60s \
  T_SMTP_PORT=25 T_SUBMISSION_PORT=587 T_SASL_HOST=127.0.0.1 T_SASL_PORT=12345 \
  T_SENDER_LOGIN_MAPS="regexp:$CONF/sender-self.regexp"
render "$TEMPLATES/postfix/main.cf" /etc/postfix/main.cf
render "$TEMPLATES/postfix/master.cf" /etc/postfix/master.cf
# The other replicas' ingresses, for when the first is down (else Postfix queues and retries).
[ -z "$fallbacks" ] || postconf -e "lmtp_fallback_relay = $fallbacks"

for entry in $MAIL_USERS; do mail-user add "${entry%%:*}" "${entry#*:}"; done

dovecot -c "$CONF/dovecot.conf"
trap 'postfix stop; dovecot -c "$CONF/dovecot.conf" stop; exit 0' TERM INT
postfix start-fg &
wait $!
