#!/usr/bin/env bash
# pg_dump in directory format, restored every way that format allows (see backup_common.bash):
# with maintain()'s partitions while the worker runs, and with pg_partman managing them.
FORMAT=directory PORT=54472
source "$(dirname "${BASH_SOURCE[0]}")/backup_common.bash"
backup_main
