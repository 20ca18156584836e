# Helpers the bench scripts share (sourced).

# The pid given and all its descendants.
tree_pids() {
  ps -eo pid=,ppid= | awk -v root="$1" '
    { kids[$2] = kids[$2] " " $1 }
    END { q[1] = root; h = 1; t = 1
          while (h <= t) { p = q[h++]; print p; m = split(kids[p], k, " ")
                           for (i = 1; i <= m; i++) q[++t] = k[i] } }'
}
