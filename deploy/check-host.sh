#!/usr/bin/env bash
# check-host.sh: read-only report of the host settings that matter to Tessera,
# followed by suggestions (a --cpus list, IRQ affinity commands, sysctl lines).
#
#   bash deploy/check-host.sh [IFACE]
#
# IFACE picks the NIC to plan for (default: the first interface with a device
# behind it that is up). The script changes nothing and needs no root. It uses
# only bash, coreutils and awk; ethtool, when installed, adds queue counts.
# Missing information (no NUMA nodes, no cpufreq, no NIC device in a VM or
# container) is reported as such, never fatal. See tuning.md for the reasons
# behind every suggestion.
#
# Testing aid: TESSERA_CHECK_SYSFS / TESSERA_CHECK_PROCFS point the script at a
# copy of /sys and /proc (default: the real ones).
set -euo pipefail
shopt -s nullglob

SYS=${TESSERA_CHECK_SYSFS:-/sys}
PROC=${TESSERA_CHECK_PROCFS:-/proc}
CPU_DIR=$SYS/devices/system/cpu
NODE_DIR=$SYS/devices/system/node

# ---------------------------------------------------------------- helpers ---

# rd FILE [DEFAULT]: first line of FILE, or DEFAULT (n/a if not given) when unreadable.
rd() {
    local v=""
    if { IFS= read -r v || [[ -n $v ]]; } 2>/dev/null <"$1"; then
        printf '%s' "$v"
    else
        printf '%s' "${2-n/a}"
    fi
}

# expand_list "0-3,8" -> "0 1 2 3 8"
expand_list() {
    local part a b i
    local -a parts out=()
    IFS=, read -ra parts <<<"$1"
    for part in "${parts[@]}"; do
        part=${part//[[:space:]]/}
        [[ -z $part ]] && continue
        if [[ $part == *-* ]]; then
            a=${part%-*} b=${part#*-}
            for ((i = a; i <= b; i++)); do out+=("$i"); done
        else
            out+=("$part")
        fi
    done
    printf '%s\n' "${out[*]:-}"
}

# sort_unique N...: numbers sorted ascending, one space between.
sort_unique() {
    (($# == 0)) && { echo; return; }
    printf '%s\n' "$@" | sort -n -u | tr '\n' ' ' | sed 's/ $//'
    echo
}

# compress_list N...: "0 1 2 3 8" -> "0-3,8"
compress_list() {
    local -a nums
    read -ra nums <<<"$(sort_unique "$@")"
    ((${#nums[@]} == 0)) && { echo "(none)"; return; }
    local ranges="" start=${nums[0]} prev=${nums[0]} n
    for n in "${nums[@]:1}"; do
        if ((n == prev + 1)); then prev=$n; continue; fi
        ranges+="${ranges:+,}$start"; ((start != prev)) && ranges+="-$prev"
        start=$n prev=$n
    done
    ranges+="${ranges:+,}$start"; ((start != prev)) && ranges+="-$prev"
    echo "$ranges"
}

# cpu_mask N...: hex CPU mask in the kernel's format (32-bit groups, comma separated).
cpu_mask() {
    local max=0 n g groups
    for n in "$@"; do ((n > max)) && max=$n; done
    groups=$((max / 32 + 1))
    local -a word=()
    for ((g = 0; g < groups; g++)); do word[g]=0; done
    for n in "$@"; do word[n / 32]=$((word[n / 32] | (1 << (n % 32)))); done
    local out
    out=$(printf '%x' "${word[groups - 1]}")
    for ((g = groups - 2; g >= 0; g--)); do out+=$(printf ',%08x' "${word[g]}"); done
    echo "$out"
}

# in_list N LIST...: is N one of LIST?
in_list() {
    local n=$1 x
    shift
    for x in "$@"; do [[ $x == "$n" ]] && return 0; done
    return 1
}

sysctl_path() { echo "$PROC/sys/${1//./\/}"; }
section() { printf '\n== %s\n' "$1"; }
have() { command -v "$1" >/dev/null 2>&1; }

# ------------------------------------------------------------ CPU topology ---

read -ra ONLINE <<<"$(expand_list "$(rd "$CPU_DIR/online" "")")"
if ((${#ONLINE[@]} == 0)); then
    # No sysfs CPU information at all: fall back to what this process may use.
    read -ra ONLINE <<<"$(seq -s ' ' 0 $(($(nproc --all) - 1)))"
fi
ALLOWED_LIST=$(awk '/^Cpus_allowed_list:/ {print $2}' "$PROC/self/status" 2>/dev/null || true)
declare -A IS_ALLOWED IS_ONLINE
for c in "${ONLINE[@]}"; do IS_ONLINE[$c]=1; done
ALLOWED=()
for c in $(expand_list "${ALLOWED_LIST:-}"); do
    [[ -n ${IS_ONLINE[$c]:-} ]] && ALLOWED+=("$c")
done
((${#ALLOWED[@]} == 0)) && ALLOWED=("${ONLINE[@]}")
for c in "${ALLOWED[@]}"; do IS_ALLOWED[$c]=1; done

declare -A CORE_OF NODE_OF THREADS_OF PKG_OF
CORES=() # one representative CPU (lowest thread) per physical core
for c in "${ONLINE[@]}"; do
    topo=$CPU_DIR/cpu$c/topology
    sib=$(rd "$topo/core_cpus_list" "")
    [[ -z $sib ]] && sib=$(rd "$topo/thread_siblings_list" "$c")
    read -ra sibs <<<"$(expand_list "$sib")"
    read -ra sibs <<<"$(sort_unique "${sibs[@]}")"
    rep=${sibs[0]:-$c}
    CORE_OF[$c]=$rep
    PKG_OF[$c]=$(rd "$topo/physical_package_id" "0")
    if [[ -z ${THREADS_OF[$rep]:-} ]]; then
        CORES+=("$rep")
        THREADS_OF[$rep]="${sibs[*]}"
    fi
done

NODES=()
for d in "$NODE_DIR"/node[0-9]*; do
    n=${d##*/node}
    NODES+=("$n")
    for c in $(expand_list "$(rd "$d/cpulist" "")"); do NODE_OF[$c]=$n; done
done
NUMA_INFO=yes
if ((${#NODES[@]} == 0)); then
    NUMA_INFO=no
    NODES=(0)
fi
read -ra NODES <<<"$(sort_unique "${NODES[@]}")"
for c in "${ONLINE[@]}"; do : "${NODE_OF[$c]:=0}"; done

max_threads=1
for rep in "${CORES[@]}"; do
    read -ra t <<<"${THREADS_OF[$rep]}"
    ((${#t[@]} > max_threads)) && max_threads=${#t[@]}
done

section "CPU topology"
echo "online CPUs:       $(compress_list "${ONLINE[@]}")   (${#ONLINE[@]} logical)"
echo "allowed for us:    $(compress_list "${ALLOWED[@]}")   (taskset/cpuset of this shell; Tessera's default --threads counts this set)"
echo "physical cores:    ${#CORES[@]}"
echo "sockets:           $(sort_unique "${PKG_OF[@]}" | wc -w)"
if ((max_threads > 1)); then
    echo "SMT:               on, up to $max_threads threads per core"
else
    echo "SMT:               off (one thread per core)"
fi
echo "SMT active:        $(rd "$CPU_DIR/smt/active" "n/a")   (control: $(rd "$CPU_DIR/smt/control" "n/a"))"
[[ $NUMA_INFO == no ]] && echo "NUMA:              no $NODE_DIR (treated as one node, node 0)"
for n in "${NODES[@]}"; do
    node_cpus=() node_cores=() node_sibs=()
    for c in "${ONLINE[@]}"; do [[ ${NODE_OF[$c]} == "$n" ]] && node_cpus+=("$c"); done
    for rep in "${CORES[@]}"; do
        [[ ${NODE_OF[$rep]} == "$n" ]] || continue
        node_cores+=("$rep")
        for t in ${THREADS_OF[$rep]}; do [[ $t != "$rep" ]] && node_sibs+=("$t"); done
    done
    mem=$(awk '/MemTotal/ {printf "%.1f GiB", $(NF-1)/1048576}' "$NODE_DIR/node$n/meminfo" 2>/dev/null || true)
    echo "node $n:            CPUs $(compress_list "${node_cpus[@]}"); ${#node_cores[@]} cores; memory ${mem:-n/a}"
    echo "  first thread of each core: $(compress_list "${node_cores[@]}")"
    ((${#node_sibs[@]})) && echo "  SMT siblings:              $(compress_list "${node_sibs[@]}")"
done
if ((max_threads > 1)); then
    echo "sibling sets (core: threads), first 8:"
    i=0
    for rep in "${CORES[@]}"; do
        ((i++ < 8)) || break
        echo "  core of cpu$rep: ${THREADS_OF[$rep]// /,}"
    done
fi
isolated=$(rd "$CPU_DIR/isolated" "")
echo "isolated CPUs:     ${isolated:-none}   nohz_full: $(rd "$CPU_DIR/nohz_full" "n/a")"

# ------------------------------------------------------------ kernel knobs ---

section "Kernel settings (net.core.somaxconn and net.ipv4.* are those of this network namespace)"
KNOBS=(
    net.core.somaxconn
    net.ipv4.tcp_max_syn_backlog
    net.core.netdev_max_backlog
    net.ipv4.tcp_tw_reuse
    net.ipv4.ip_local_port_range
    net.core.busy_poll
    net.core.busy_read
    net.core.rps_sock_flow_entries
    vm.overcommit_memory
    fs.nr_open
)
declare -A CUR
for k in "${KNOBS[@]}"; do
    CUR[$k]=$(rd "$(sysctl_path "$k")" "n/a")
    CUR[$k]=${CUR[$k]//$'\t'/ }
    printf '%-32s %s\n' "$k" "${CUR[$k]}"
done
if [[ ${CUR[net.core.netdev_max_backlog]} == n/a ]]; then
    echo "  (n/a for host-wide net.core knobs: this is not the host's network namespace)"
fi

section "Memory"
THP=$(rd "$SYS/kernel/mm/transparent_hugepage/enabled")
THP_DEFRAG=$(rd "$SYS/kernel/mm/transparent_hugepage/defrag")
echo "THP enabled:       $THP"
echo "THP defrag:        $THP_DEFRAG"
echo "explicit hugepages: $(awk '/^HugePages_Total/ {t=$2} /^Hugepagesize/ {s=$2" "$3} END {print t+0 " x " s}' "$PROC/meminfo" 2>/dev/null || echo n/a)"

section "CPU frequency and idle states"
declare -A GOVS=()
for c in "${ONLINE[@]}"; do
    g=$(rd "$CPU_DIR/cpu$c/cpufreq/scaling_governor" "")
    [[ -n $g ]] && GOVS[$g]+="$c "
done
GOVERNORS="${!GOVS[*]}"
if ((${#GOVS[@]} == 0)); then
    echo "governor:          no cpufreq in sysfs (common in VMs: the hypervisor/firmware controls frequency)"
else
    echo "scaling driver:    $(rd "$CPU_DIR/cpu${ONLINE[0]}/cpufreq/scaling_driver")"
    for g in "${!GOVS[@]}"; do
        read -ra gc <<<"${GOVS[$g]}"
        echo "governor:          $g on CPUs $(compress_list "${gc[@]}")"
    done
fi
echo "cpuidle driver:    $(rd "$CPU_DIR/cpuidle/current_driver")"
for s in "$CPU_DIR/cpu${ONLINE[0]}"/cpuidle/state[0-9]*; do
    printf '  cpu%s %-8s %-10s exit latency %4s us  disabled=%s\n' "${ONLINE[0]}" "${s##*/}" \
        "$(rd "$s/name")" "$(rd "$s/latency")" "$(rd "$s/disable")"
done

# ------------------------------------------------------------------ limits ---

section "Limits of this shell (a systemd unit uses its own LimitNOFILE=/LimitMEMLOCK=)"
NOFILE_SOFT=$(ulimit -Sn) NOFILE_HARD=$(ulimit -Hn)
MEMLOCK_SOFT=$(ulimit -Sl) MEMLOCK_HARD=$(ulimit -Hl)
echo "open files (ulimit -n):      soft $NOFILE_SOFT, hard $NOFILE_HARD"
echo "locked memory KiB (ulimit -l): soft $MEMLOCK_SOFT, hard $MEMLOCK_HARD"
echo "seccomp mode of this shell:  $(awk '/^Seccomp:/ {print $2}' "$PROC/self/status" 2>/dev/null || echo n/a)   (0 none, 2 filter)"

IRQBALANCE=not-running
for f in "$PROC"/[0-9]*/comm; do
    if [[ $(rd "$f" "") == irqbalance ]]; then IRQBALANCE=running; break; fi
done
echo "irqbalance:                  $IRQBALANCE"

# -------------------------------------------------------------------- NICs ---

# INTERRUPT_NAME[irq] = the action name from /proc/interrupts (last field).
declare -A INTERRUPT_NAME
while read -r irq name; do
    INTERRUPT_NAME[$irq]=$name
done < <(awk '$1 ~ /^[0-9]+:$/ {sub(":", "", $1); print $1, $NF}' "$PROC/interrupts" 2>/dev/null || true)

# nic_device IFACE: the sysfs device directory that owns the NIC's IRQs, or "".
nic_device() {
    local dev
    [[ -e $SYS/class/net/$1/device ]] || { echo ""; return; }
    dev=$(readlink -f "$SYS/class/net/$1/device")
    # virtio-net: the netdev hangs off virtioN, the MSI-X vectors off its PCI parent.
    if [[ ! -d $dev/msi_irqs && -d $dev/../msi_irqs ]]; then dev=$(readlink -f "$dev/.."); fi
    echo "$dev"
}

# nic_irqs IFACE: IRQ numbers of the NIC, ascending.
nic_irqs() {
    local dev irqs=() f irq
    dev=$(nic_device "$1")
    if [[ -n $dev && -d $dev/msi_irqs ]]; then
        for f in "$dev"/msi_irqs/*; do irqs+=("${f##*/}"); done
    elif [[ -n $dev && -r $dev/irq && $(rd "$dev/irq" 0) != 0 ]]; then
        irqs+=("$(rd "$dev/irq")")
    else
        for irq in "${!INTERRUPT_NAME[@]}"; do
            [[ ${INTERRUPT_NAME[$irq]} == *"$1"* ]] && irqs+=("$irq")
        done
    fi
    sort_unique "${irqs[@]}"
}

# queue_irq IRQ IFACE: the queue index an IRQ serves, from its name, or "" for
# control/config vectors (mlx5_comp3@pci:..., eth0-TxRx-3, virtio0-input.3 are
# queues; mlx5_async0, virtio0-config and a bare "eth0" are not).
queue_irq() {
    local name=${INTERRUPT_NAME[$1]:-}
    name=${name%%@*}
    name=${name//"$2"/}
    shopt -s nocasematch
    if [[ -z $name || $name =~ (config|async|ctrl|cmd|mgmt|link|misc|adminq|-aq|mbox|fw) ]]; then
        shopt -u nocasematch
        echo ""
        return
    fi
    shopt -u nocasematch
    [[ $name =~ ([0-9]+)$ ]] && echo "${BASH_REMATCH[1]}" || echo ""
}

section "Network interfaces"
declare -A CH_MAX=() CH_CUR=()
IFACES=()
for d in "$SYS"/class/net/*; do
    ifc=${d##*/}
    [[ $ifc == lo ]] && continue
    IFACES+=("$ifc")
done
TARGET_IF=${1:-}
if ((${#IFACES[@]} == 0)); then
    echo "no interfaces besides lo"
fi
for ifc in "${IFACES[@]}"; do
    d=$SYS/class/net/$ifc
    rxq=("$d"/queues/rx-*) txq=("$d"/queues/tx-*)
    dev=$(nic_device "$ifc")
    state=$(rd "$d/operstate")
    if [[ -z $dev ]]; then
        echo "$ifc: virtual (no $d/device), state $state, ${#rxq[@]} rx / ${#txq[@]} tx queues; no IRQs to place"
        continue
    fi
    driver=$(basename "$(readlink -f "$d/device/driver" 2>/dev/null || echo n/a)")
    numa=$(rd "$d/device/numa_node" "")
    [[ -z $numa ]] && numa=$(rd "$dev/numa_node" "-1")
    speed=$(rd "$d/speed" "")
    [[ $speed =~ ^[0-9]+$ ]] && speed="$speed Mb/s" || speed=unknown
    echo "$ifc: driver $driver, state $state, speed $speed, NUMA node $numa, local CPUs $(rd "$dev/local_cpulist" "n/a")"
    echo "  queues: ${#rxq[@]} rx, ${#txq[@]} tx; rx-0 rps_cpus=$(rd "$d/queues/rx-0/rps_cpus")  tx-0 xps_cpus=$(rd "$d/queues/tx-0/xps_cpus")"
    if have ethtool; then
        ch=$(timeout 5 ethtool -l "$ifc" 2>/dev/null |
            awk '/^Pre-set/ {s="max"} /^Current/ {s="current"} /^Combined:/ {print s, $2}' || true)
        CH_MAX[$ifc]=$(awk '$1 == "max" {print $2}' <<<"$ch")
        CH_CUR[$ifc]=$(awk '$1 == "current" {print $2}' <<<"$ch")
        echo "  ethtool -l combined channels: max ${CH_MAX[$ifc]:-n/a}, current ${CH_CUR[$ifc]:-n/a}"
    else
        echo "  ethtool not installed (apt-get install ethtool) - channel counts from sysfs only"
    fi
    read -ra irqs <<<"$(nic_irqs "$ifc")"
    if ((${#irqs[@]} == 0)); then
        echo "  IRQs: none found"
    else
        echo "  IRQ   affinity      effective     name"
        for irq in "${irqs[@]}"; do
            printf '  %-5s %-13s %-13s %s\n' "$irq" "$(rd "$PROC/irq/$irq/smp_affinity_list")" \
                "$(rd "$PROC/irq/$irq/effective_affinity_list")" "${INTERRUPT_NAME[$irq]:-?}"
        done
    fi
    if [[ -z $TARGET_IF && $state == up ]]; then TARGET_IF=$ifc; fi
done
if [[ -z $TARGET_IF ]]; then
    for ifc in "${IFACES[@]}"; do
        if [[ -n $(nic_device "$ifc") ]]; then TARGET_IF=$ifc; break; fi
    done
fi

# ------------------------------------------------------------- suggestions ---

section "Suggestions"

# Node to place shards on: the NIC's node when known, else node 0 (or the lowest node).
NODE=${NODES[0]}
NODE_WHY="lowest node"
if [[ -n $TARGET_IF ]]; then
    n=$(rd "$SYS/class/net/$TARGET_IF/device/numa_node" "")
    [[ -z $n ]] && { dev=$(nic_device "$TARGET_IF"); [[ -n $dev ]] && n=$(rd "$dev/numa_node" "-1"); }
    if [[ $n =~ ^[0-9]+$ ]] && in_list "$n" "${NODES[@]}"; then
        NODE=$n NODE_WHY="the node of $TARGET_IF"
    fi
fi
if [[ $NODE_WHY == "lowest node" ]] && in_list 0 "${NODES[@]}"; then NODE=0 NODE_WHY="NIC node unknown"; fi

# shard_cores NODE: one CPU (the first thread) per physical core on NODE among
# the CPUs we may use; failing that, any CPU we may use on NODE.
shard_cores() {
    local rep c
    local -a picked=()
    for rep in "${CORES[@]}"; do
        [[ ${NODE_OF[$rep]} == "$1" && -n ${IS_ALLOWED[$rep]:-} ]] && picked+=("$rep")
    done
    if ((${#picked[@]} == 0)); then
        for c in "${ALLOWED[@]}"; do [[ ${NODE_OF[$c]:-} == "$1" ]] && picked+=("$c"); done
    fi
    echo "${picked[*]:-}"
}
read -ra SHARD_CORES <<<"$(shard_cores "$NODE")"
if ((${#SHARD_CORES[@]} == 0)); then
    # None of our CPUs is on that node (taskset/cpuset elsewhere): use the first node we have.
    for n in "${NODES[@]}"; do
        read -ra SHARD_CORES <<<"$(shard_cores "$n")"
        if ((${#SHARD_CORES[@]})); then
            NODE=$n NODE_WHY="the node of our allowed CPUs; NIC node has none of them"
            break
        fi
    done
fi
CORE0=${CORE_OF[0]:-none}
if ((${#SHARD_CORES[@]} >= 4)) && in_list "$CORE0" "${SHARD_CORES[@]}"; then
    kept=()
    for rep in "${SHARD_CORES[@]}"; do [[ $rep == "$CORE0" ]] || kept+=("$rep"); done
    SHARD_CORES=("${kept[@]}")
    EXCL="; the core of CPU 0 is left to the OS and IRQs"
else
    EXCL=""
fi
CPUS=$(compress_list "${SHARD_CORES[@]}")
NSHARDS=${#SHARD_CORES[@]}

echo "1. Shard CPUs: one per physical core on NUMA node $NODE ($NODE_WHY)$EXCL:"
echo "     tessera --cpus $CPUS            # $NSHARDS shard(s)"
echo "     (tessera.conf: 'cpus $CPUS'; confirm with the startup lines 'shard N -> cpu C -> slots A-B')"
# What Tessera does without --cpus (src/server/topology.rs): one shard per physical
# core on the node with the most allowed CPUs (lowest node on a tie), ignoring the NIC.
DEFAULT_NODE="" best=-1
for n in "${NODES[@]}"; do
    cnt=0
    for c in "${ALLOWED[@]}"; do [[ ${NODE_OF[$c]:-0} == "$n" ]] && cnt=$((cnt + 1)); done
    ((cnt > best)) && { best=$cnt; DEFAULT_NODE=$n; }
done
DEFAULT_CPUS=()
declare -A SEEN_CORE=()
for c in "${ALLOWED[@]}"; do
    core=${CORE_OF[$c]:-$c}
    [[ ${NODE_OF[$c]:-0} == "$DEFAULT_NODE" && -z ${SEEN_CORE[$core]:-} ]] || continue
    SEEN_CORE[$core]=1
    DEFAULT_CPUS+=("$c")
done
echo "   Without --cpus Tessera picks node $DEFAULT_NODE (most allowed CPUs), one CPU per core:"
echo "     CPUs $(compress_list "${DEFAULT_CPUS[@]}")   (${#DEFAULT_CPUS[@]} shard(s); its startup log line 'placement: ...' says the same)"
echo "   and warns when an explicit --cpus mixes SMT siblings, spans nodes/sockets or has fewer cores than shards."
if ((${#NODES[@]} > 1)); then
    echo "   Keep memory on the same node:"
    echo "     numactl --cpunodebind=$NODE --membind=$NODE tessera --cpus $CPUS"
    echo "     (systemd: NUMAPolicy=bind and NUMAMask=$NODE in the unit)"
    echo "   Or one instance per node, each on its own port, for example:"
    port=6379
    for n in "${NODES[@]}"; do
        reps=()
        for rep in "${CORES[@]}"; do
            [[ ${NODE_OF[$rep]} == "$n" ]] && reps+=("$rep")
        done
        if ((${#reps[@]} >= 4)) && in_list "$CORE0" "${reps[@]}"; then
            kept=()
            for rep in "${reps[@]}"; do [[ $rep == "$CORE0" ]] || kept+=("$rep"); done
            reps=("${kept[@]}")
        fi
        ((${#reps[@]})) || continue
        echo "     numactl --cpunodebind=$n --membind=$n tessera --port $port --cpus $(compress_list "${reps[@]}")"
        port=$((port + 1))
    done
fi
if ((max_threads > 1)); then
    echo "   SMT siblings of these cores stay free: leave them idle, or give them the NIC IRQs (step 2)."
fi

# CPUs that take the NIC's queue IRQs: the SMT siblings of the shard cores, or
# (no SMT) the shard CPUs themselves, one queue per shard.
IRQ_CPUS=()
for c in "${SHARD_CORES[@]}"; do
    sib=""
    for t in ${THREADS_OF[${CORE_OF[$c]:-$c}]:-$c}; do [[ $t != "$c" ]] && { sib=$t; break; }; done
    IRQ_CPUS+=("${sib:-$c}")
done

echo
if [[ -z $TARGET_IF ]]; then
    echo "2. NIC: no interface with a device behind it (VM without PCI info or a container's"
    echo "   network namespace). IRQ placement is done on the host, not here."
else
    read -ra irqs <<<"$(nic_irqs "$TARGET_IF")"
    d=$SYS/class/net/$TARGET_IF
    rxq=("$d"/queues/rx-*) txq=("$d"/queues/tx-*)
    if ((max_threads > 1)); then
        echo "2. NIC $TARGET_IF: put queue IRQs on the SMT siblings of the shard cores ($(compress_list "${IRQ_CPUS[@]}"))."
    else
        echo "2. NIC $TARGET_IF: no SMT, so queue k takes its IRQ on shard k's CPU"
        echo "   (alternative with a busy NIC: keep shards off a few same-node cores and put IRQs there)."
    fi
    if [[ $IRQBALANCE == running ]]; then
        echo "   irqbalance is running and rewrites IRQ affinity. Either stop it and set affinity by hand (below):"
        echo "     sudo systemctl disable --now irqbalance"
        echo "   or keep it but ban the shard CPUs, so it places IRQs only elsewhere (Debian 12's irqbalance 1.9 reads it):"
        echo "     echo 'IRQBALANCE_BANNED_CPULIST=$CPUS' | sudo tee -a /etc/default/irqbalance && sudo systemctl restart irqbalance"
    fi
    maxq=${CH_MAX[$TARGET_IF]:-}
    if [[ $maxq =~ ^[0-9]+$ ]]; then
        want=$((maxq < NSHARDS ? maxq : NSHARDS))
        if ((want <= 1)); then
            echo "   The NIC has a single queue (ethtool -l max $maxq): spread receive work with RPS (below)."
        elif [[ ${CH_CUR[$TARGET_IF]:-} == "$want" ]]; then
            echo "   Queue count: ok ($want combined channels for $NSHARDS shards)."
        else
            echo "   Queue count = shard count, capped at the NIC's maximum $maxq:"
            echo "     sudo ethtool -L $TARGET_IF combined $want"
            echo "     sudo ethtool -X $TARGET_IF equal $want   # RSS over those queues; check: ethtool -x $TARGET_IF"
        fi
    else
        echo "   Queue count = shard count where the NIC allows it (maximum: ethtool -l $TARGET_IF):"
        echo "     sudo ethtool -L $TARGET_IF combined $NSHARDS"
        echo "     sudo ethtool -X $TARGET_IF equal $NSHARDS   # RSS over those queues; check: ethtool -x $TARGET_IF"
    fi
    if ((${#irqs[@]})); then
        echo "   IRQ affinity (re-run this script after changing the queue count; managed IRQs answer 'Input/output error'):"
        for irq in "${irqs[@]}"; do
            q=$(queue_irq "$irq" "$TARGET_IF")
            if [[ -z $q ]]; then
                echo "     # IRQ $irq (${INTERRUPT_NAME[$irq]:-?}) is a control vector: leave it"
                continue
            fi
            cpu=${IRQ_CPUS[q % ${#IRQ_CPUS[@]}]}
            echo "     echo $cpu | sudo tee /proc/irq/$irq/smp_affinity_list   # ${INTERRUPT_NAME[$irq]:-?}"
        done
    fi
    if ((${#rxq[@]} < NSHARDS)); then
        echo "   While there are fewer rx queues than shards (now ${#rxq[@]} for $NSHARDS), spread protocol work with RPS:"
        for ((q = 0; q < ${#rxq[@]}; q++)); do
            echo "     echo $(cpu_mask "${IRQ_CPUS[@]}") | sudo tee $d/queues/rx-$q/rps_cpus"
        done
    fi
    if ((${#txq[@]} > 1)); then
        echo "   XPS: each shard CPU sends on its own tx queue (many drivers already set this):"
        for ((q = 0; q < ${#txq[@]} && q < NSHARDS; q++)); do
            sel=()
            for ((k = q; k < NSHARDS; k += ${#txq[@]})); do sel+=("${SHARD_CORES[k]}"); done
            echo "     echo $(cpu_mask "${sel[@]}") | sudo tee $d/queues/tx-$q/xps_cpus"
        done
    fi
fi

echo
echo "3. sysctl (install deploy/sysctl-tessera.conf as /etc/sysctl.d/90-tessera.conf, then 'sudo sysctl --system'):"
# suggest KEY VALUE: print the line, marked when the host already has at least VALUE.
suggest() {
    local cur=${CUR[$1]:-n/a} mark="current ${CUR[$1]:-n/a}"
    if [[ $cur =~ ^[0-9]+$ ]] && ((cur >= $2)); then mark="ok, current $cur"; fi
    printf '     %-38s # %s\n' "$1 = $2" "$mark"
}
suggest net.core.somaxconn 4096
suggest net.ipv4.tcp_max_syn_backlog 4096
suggest net.core.netdev_max_backlog 16384
printf '     %-38s # current %s; 0 is fine for Tessera (no fork), 1 matches Redis advice\n' \
    "vm.overcommit_memory = 0" "${CUR[vm.overcommit_memory]}"
echo "   On benchmark client hosts only:"
printf '     %-38s # current %s\n' "net.ipv4.tcp_tw_reuse = 1" "${CUR[net.ipv4.tcp_tw_reuse]}"
printf '     %-38s # current %s\n' "net.ipv4.ip_local_port_range = 1024 65535" "${CUR[net.ipv4.ip_local_port_range]}"

echo
echo "4. Other settings:"
if [[ $THP == *"[always]"* ]]; then
    echo "   THP is 'always': switch to madvise (persist with transparent_hugepage=madvise on the kernel command line):"
    echo "     echo madvise | sudo tee $SYS/kernel/mm/transparent_hugepage/enabled"
elif [[ $THP == n/a ]]; then
    echo "   THP: not available on this kernel"
else
    echo "   THP: ok ($THP)"
fi
if ((${#GOVS[@]})); then
    if [[ $GOVERNORS != performance ]]; then
        echo "   Governor is '$GOVERNORS': sudo cpupower frequency-set -g performance   (apt-get install linux-cpupower)"
    else
        echo "   Governor: ok (performance)"
    fi
fi
echo "   ulimit -l: not used (Tessera's epoll runtime locks no memory; current $MEMLOCK_SOFT KiB)"
if [[ $NOFILE_SOFT != unlimited ]] && ((NOFILE_SOFT < 10032)); then
    echo "   ulimit -n is $NOFILE_SOFT: below maxclients 10000 + 32 reserved; raise it (systemd: LimitNOFILE=100000)"
else
    echo "   ulimit -n: ok for maxclients 10000 ($NOFILE_SOFT)"
fi
