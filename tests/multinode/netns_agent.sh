#!/usr/bin/env bash
# Open MPI's launcher agent for the namespace "cluster" (used as plm_rsh_agent in place of
# ssh): `netns_agent.sh [options] HOST COMMAND...` runs COMMAND inside the network namespace
# whose veth address is HOST (and a UTS namespace named like it), as ssh would run it there. SO_NETNS_MAP holds
# "address=namespace" pairs separated by spaces.
while [[ ${1:-} == -* ]]; do shift; done  # ssh-style options Open MPI may pass
host=$1
shift
for pair in $SO_NETNS_MAP; do
  if [[ ${pair%%=*} == "$host" ]]; then
    # Its own UTS namespace too: the "node" has its own hostname, as a real one would.
    exec ip netns exec "${pair#*=}" unshare --uts /bin/sh -c "hostname ${pair#*=}; $*"
  fi
done
echo "netns_agent: no namespace for host $host (SO_NETNS_MAP='$SO_NETNS_MAP')" >&2
exit 255
