#!/bin/sh
# The TLS terminator when it checks a certificate revocation list (temporal.embedded.tls.revocationList):
# nginx in the foreground of this shell, and a loop that makes it read its files again when one of
# them changes on disk. nginx reads ssl_crl (and ssl_client_certificate) only when it starts or
# reloads; the kubelet updates a mounted Secret or ConfigMap in place (within about a minute), so
# without this an updated CRL would wait for the pod's next restart — and restarting the pod
# restarts the Temporal server beside it.
#
#   sh temporal-tls-proxy-reload.sh NGINX_CONF WATCHED_FILE...
#
# Every TLS_PROXY_RELOAD_INTERVAL seconds (10) the watched files (the CRL, the CA, the configuration)
# are read; when any differs from the last look, `nginx -t` checks the configuration with them and
# nginx gets SIGHUP (a reload: new connections get the new files at once, old workers finish within
# worker_shutdown_timeout). Files nginx refuses are logged and not loaded: the previous ones stay in
# force until a good one comes. SIGTERM/SIGINT/SIGQUIT go to nginx; this shell exits with nginx's
# status, and as soon as nginx exits, whatever the cause (the container is restarted then).
# POSIX sh only (busybox in nginx's alpine image).
set -u
conf=$1
shift
interval=${TLS_PROXY_RELOAD_INTERVAL:-10}

look() {
    # Every watched file's content (a few kilobytes; no tool but cat): a missing file counts as a change.
    for f in "$@"; do
        if [ -r "$f" ]; then echo "== $f"; cat "$f"; else echo "missing $f"; fi
    done
}

stopping=
nginx -c "$conf" -e stderr -g "daemon off;" &
pid=$!
trap 'stopping=1; kill -TERM "$pid" 2>/dev/null' TERM INT
trap 'stopping=1; kill -QUIT "$pid" 2>/dev/null' QUIT

last=$(look "$@")
while [ -z "$stopping" ] && kill -0 "$pid" 2>/dev/null; do
    # A trapped signal ends `wait` at once: nginx is told without waiting out the interval.
    sleep "$interval" &
    wait $! 2>/dev/null || true
    [ -z "$stopping" ] && kill -0 "$pid" 2>/dev/null || break
    now=$(look "$@")
    [ "$now" = "$last" ] && continue
    last=$now
    if nginx -t -q -c "$conf" -e stderr; then
        echo "tls-proxy: a watched file changed (CRL, CA or configuration): reloading nginx" >&2
        kill -HUP "$pid"
    else
        echo "tls-proxy: a watched file changed but nginx refuses it: not reloaded, the previous files stay in force" >&2
    fi
done
wait "$pid"
