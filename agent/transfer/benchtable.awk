# benchtable.awk formats BenchmarkNIXL output (make bench-nixl) as the
# markdown rows of README's NIXL table: mode, page, batch, GB/s, µs per
# descriptor, prep / post / transfer average and p99 (µs), the host
# backend's GB/s on the same descriptors, and the ratio.
/^BenchmarkNIXL\// {
  split($1, p, "/"); mode = p[2]; page = p[3]; sub("page=", "", page); batch = p[4]; sub("batch=", "", batch); sub(/-[0-9]+$/, "", batch)
  delete m
  for (i = 3; i < NF; i += 2) m[$(i+1)] = $i
  printf "| %s | %s | %s | %.3f | %.1f | %.1f / %.0f | %.1f / %.0f | %.0f / %.0f | %.3f | %.2f |\n", mode, page, batch, m["GB/s"], m["us/desc"], m["prep-us"], m["prep-p99-us"], m["post-us"], m["post-p99-us"], m["xfer-us"], m["xfer-p99-us"], m["host-GB/s"], m["x-host"]
}
/^BenchmarkNIXLPrepare\// { print }
