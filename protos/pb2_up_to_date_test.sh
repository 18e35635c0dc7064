#!/usr/bin/env bash
# Bazel test (//protos:pb2_up_to_date_test): each module the genrule //protos:py_pb2 generated
# (the arguments) must equal the committed tf_autoplace/proto/<same name>, byte for byte.
set -euo pipefail
status=0
for generated in "$@"; do
  committed="tf_autoplace/proto/$(basename "$generated")"
  if ! cmp "$generated" "$committed"; then
    echo "FAIL: $committed differs from the module protoc makes; run python tools/gen_protos.py" >&2
    status=1
  else
    echo "ok: $committed"
  fi
done
exit $status
