# Helpers the bench scripts share (sourced).

# The pid given and all its descendants.
tree_pids() {
  ps -eo pid=,ppid= | awk -v root="$1" '
    { kids[$2] = kids[$2] " " $1 }
    END { q[1] = root; h = 1; t = 1
          while (h <= t) { p = q[h++]; print p; m = split(kids[p], k, " ")
                           for (i = 1; i <= m; i++) q[++t] = k[i] } }'
}

# unbound's configuration for the benches, on stdout: 127.0.0.1@PORT, its
# files in DIR, one thread, www.example.test from local-data (no
# recursion); EXTRA (optional) adds lines to its server: section.
unbound_conf() {
  local port=$1 dir=$2 extra=${3:-}
  cat <<CONF
server:
  verbosity: 1
  interface: 127.0.0.1@$port
  do-ip6: no
  do-daemonize: no
  use-syslog: no
  logfile: ""
  username: ""
  chroot: ""
  directory: "$dir"
  pidfile: ""
  num-threads: 1
  access-control: 127.0.0.0/8 allow
  local-zone: "example.test." static
  local-data: "www.example.test. 60 IN A 192.0.2.80"
${extra:+$extra
}remote-control:
  control-enable: no
CONF
}

# nginx in its stock shape for the benches (worker_processes auto,
# worker_connections 768, keepalive_requests at its default), its files in
# DIR, listening on 127.0.0.1:PORT: "ok" at /, stub_status at /status.
# Starts it (daemon; its pid in DIR/nginx.pid) and waits until it accepts.
nginx_start() {
  local dir=$1 port=$2
  cat > "$dir/nginx.conf" <<CONF
daemon on;
worker_processes auto;
pid $dir/nginx.pid;
error_log $dir/error.log;
events { worker_connections 768; }
http {
  access_log off;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  server {
    listen 127.0.0.1:$port;
    location / { return 200 "ok\n"; }
    location = /status { stub_status; }
  }
}
CONF
  nginx -p "$dir" -c "$dir/nginx.conf"
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.1; done
}

# The requests nginx on 127.0.0.1:PORT has served (its stub_status; this
# request counts among them).
nginx_requests() {
  exec 3<>"/dev/tcp/127.0.0.1/$1"
  printf 'GET /status HTTP/1.0\r\n\r\n' >&3
  awk 'f { print $3; exit } /server accepts handled requests/ { f = 1 }' <&3
  exec 3<&-
}

# throng's discard server (4 processes) on 127.0.0.1:PORT, its output in
# WORK/server.out: started, waited for until it listens, and ended with
# its processes (and WORK removed) when the script exits.
discard_server_start() {
  local bin=$1 port=$2
  work=$3
  "$bin" server --mode discard --listen "127.0.0.1:$port" --processes 4 >"$work/server.out" 2>&1 &
  srv=$!
  trap discard_server_cleanup EXIT
  trap 'exit 130' INT TERM
  until grep -q '^listen backlog' "$work/server.out"; do
    kill -0 "$srv" 2>/dev/null || { cat "$work/server.out"; exit 1; }
    sleep 0.05
  done
}

discard_server_cleanup() {
  local kids
  kids=$(ps -o pid= --ppid "$srv" 2>/dev/null || true)
  kill -TERM "$srv" 2>/dev/null || true
  wait "$srv" 2>/dev/null || true
  for p in $kids; do kill -TERM "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
