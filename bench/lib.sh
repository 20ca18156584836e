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
