//! CPU topology from sysfs, and the choice of shard CPUs.
//!
//! A shard is a busy thread that owns its data: two shards on SMT siblings of one core
//! share its execution units and caches and each runs well below a full core, and
//! shards on different NUMA nodes or sockets pay remote-memory latency on every
//! cross-shard hop. The default placement is therefore one shard per physical core
//! (the lowest-numbered thread of each core) on one NUMA node, the node where this
//! process may use the most CPUs (sched_getaffinity: taskset, cpusets, systemd's
//! CPUAffinity= all narrow it). An explicit `--cpus` is obeyed but checked, with a
//! warning for each of these pitfalls.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One logical CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cpu {
    pub id: usize,
    /// Identifies the physical core: the lowest CPU id among its SMT siblings.
    pub core: usize,
    /// Socket (physical_package_id).
    pub package: usize,
    /// NUMA node (0 when the kernel exposes none).
    pub node: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    /// Known CPUs by id.
    pub cpus: BTreeMap<usize, Cpu>,
}

/// The default choice, with what it was based on (for the startup log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// One CPU per physical core on `node`, ascending.
    pub preferred: Vec<usize>,
    /// Every other allowed CPU, least harmful first: other nodes' cores, then SMT
    /// siblings. Used only when more shards are asked for than `preferred` holds.
    pub spill: Vec<usize>,
    pub node: usize,
}

/// Upper bound on CPU ids read from sysfs, so a corrupt tree cannot make us allocate
/// without limit (the config accepts ids up to a similar bound).
const MAX_CPU_ID: usize = 1 << 16;

impl Topology {
    /// Reads the machine's topology; CPUs sysfs does not describe (no /sys in a
    /// container, say) are treated as separate cores on node 0.
    pub fn detect(allowed: &[usize]) -> Topology {
        let mut t = Topology::read_sysfs(Path::new("/sys")).unwrap_or_default();
        t.add_missing(allowed);
        t
    }

    /// Reads `<root>/devices/system/cpu/cpu*/topology/` and
    /// `<root>/devices/system/node/node*/cpulist`. None if no CPU could be read.
    pub fn read_sysfs(root: &Path) -> Option<Topology> {
        let cpu_dir = root.join("devices/system/cpu");
        let mut cpus = BTreeMap::new();
        for entry in std::fs::read_dir(&cpu_dir).ok()?.flatten() {
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_prefix("cpu"))
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|&id| id <= MAX_CPU_ID)
            else {
                continue;
            };
            let topo = entry.path().join("topology");
            // Offline CPUs have no topology directory: they cannot run shards anyway.
            let Some(package) = read_number(&topo.join("physical_package_id")) else {
                continue;
            };
            let core_id = read_number(&topo.join("core_id"));
            let siblings = std::fs::read_to_string(topo.join("thread_siblings_list"))
                .ok()
                .and_then(|s| parse_cpu_list(s.trim()));
            cpus.insert(
                id,
                RawCpu {
                    package,
                    core_id,
                    siblings,
                },
            );
        }
        if cpus.is_empty() {
            return None;
        }
        let mut nodes = BTreeMap::new();
        if let Ok(dir) = std::fs::read_dir(root.join("devices/system/node")) {
            for entry in dir.flatten() {
                let name = entry.file_name();
                let Some(node) = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("node"))
                    .and_then(|n| n.parse::<usize>().ok())
                else {
                    continue;
                };
                let list = std::fs::read_to_string(entry.path().join("cpulist")).ok();
                for cpu in list
                    .and_then(|s| parse_cpu_list(s.trim()))
                    .unwrap_or_default()
                {
                    nodes.insert(cpu, node);
                }
            }
        }
        Some(Topology::assemble(cpus, &nodes))
    }

    /// Groups raw per-CPU facts into cores: SMT siblings from thread_siblings_list,
    /// or, where that is missing, CPUs with the same (package, core_id).
    fn assemble(raw: BTreeMap<usize, RawCpu>, nodes: &BTreeMap<usize, usize>) -> Topology {
        let mut by_core_id: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        for (&id, r) in &raw {
            if let Some(c) = r.core_id {
                let e = by_core_id.entry((r.package, c)).or_insert(id);
                *e = (*e).min(id);
            }
        }
        let cpus = raw
            .iter()
            .map(|(&id, r)| {
                let core = match (&r.siblings, r.core_id) {
                    (Some(s), _) if s.contains(&id) => s.iter().copied().min().unwrap_or(id),
                    (_, Some(c)) => by_core_id.get(&(r.package, c)).copied().unwrap_or(id),
                    _ => id,
                };
                let cpu = Cpu {
                    id,
                    core,
                    package: r.package,
                    node: nodes.get(&id).copied().unwrap_or(0),
                };
                (id, cpu)
            })
            .collect();
        Topology { cpus }
    }

    fn add_missing(&mut self, ids: &[usize]) {
        for &id in ids {
            self.cpus.entry(id).or_insert(Cpu {
                id,
                core: id,
                package: 0,
                node: 0,
            });
        }
    }

    /// Builds a topology from (id, core, package, node) rows: for tests and callers
    /// that already know the layout.
    pub fn from_rows(rows: &[(usize, usize, usize, usize)]) -> Topology {
        let cpus = rows
            .iter()
            .map(|&(id, core, package, node)| {
                (
                    id,
                    Cpu {
                        id,
                        core,
                        package,
                        node,
                    },
                )
            })
            .collect();
        Topology { cpus }
    }

    /// The default placement over the CPUs this process may use.
    pub fn choose(&self, allowed: &[usize]) -> Choice {
        let allowed: BTreeSet<usize> = allowed.iter().copied().collect();
        let usable: Vec<&Cpu> = self
            .cpus
            .values()
            .filter(|c| allowed.contains(&c.id))
            .collect();
        let mut per_node: BTreeMap<usize, usize> = BTreeMap::new();
        for c in &usable {
            *per_node.entry(c.node).or_default() += 1;
        }
        // Most allowed CPUs wins; the lowest node id breaks ties (iteration order,
        // and max_by_key keeps the last maximum, hence the reversed id).
        let node = per_node
            .iter()
            .max_by_key(|&(&n, &count)| (count, std::cmp::Reverse(n)))
            .map(|(&n, _)| n)
            .unwrap_or(0);
        // The lowest allowed thread of each core, per node.
        let mut first_of_core: BTreeMap<usize, &Cpu> = BTreeMap::new();
        for c in &usable {
            first_of_core.entry(c.core).or_insert(c);
        }
        let mut preferred: Vec<usize> = first_of_core
            .values()
            .filter(|c| c.node == node)
            .map(|c| c.id)
            .collect();
        preferred.sort_unstable();
        let mut other_cores: Vec<&Cpu> = first_of_core
            .values()
            .filter(|c| c.node != node)
            .copied()
            .collect();
        other_cores.sort_by_key(|c| (std::cmp::Reverse(per_node.get(&c.node)), c.node, c.id));
        let taken: BTreeSet<usize> = first_of_core.values().map(|c| c.id).collect();
        let mut siblings: Vec<&Cpu> = usable
            .iter()
            .filter(|c| !taken.contains(&c.id))
            .copied()
            .collect();
        siblings.sort_by_key(|c| (c.node != node, c.id));
        let spill = other_cores
            .iter()
            .chain(siblings.iter())
            .map(|c| c.id)
            .collect();
        Choice {
            preferred,
            spill,
            node,
        }
    }

    /// Problems with an explicit CPU list for `shards` shards, one message each.
    pub fn check(&self, cpus: &[usize], shards: usize, allowed: &[usize]) -> Vec<String> {
        let mut warnings = Vec::new();
        let list: BTreeSet<usize> = cpus.iter().copied().collect();
        let known: Vec<&Cpu> = list.iter().filter_map(|id| self.cpus.get(id)).collect();
        let mut cores: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for c in &known {
            cores.entry(c.core).or_default().push(c.id);
        }
        let shared: Vec<String> = cores
            .values()
            .filter(|ids| ids.len() > 1)
            .map(|ids| render_cpu_list(ids))
            .collect();
        if !shared.is_empty() {
            warnings.push(format!(
                "--cpus puts shards on SMT siblings of one core ({}): they share its \
                 execution units; prefer one CPU per physical core",
                shared.join("; ")
            ));
        }
        let nodes: BTreeSet<usize> = known.iter().map(|c| c.node).collect();
        if nodes.len() > 1 {
            warnings.push(format!(
                "--cpus spans NUMA nodes {}: cross-shard hops and memory become remote; \
                 prefer one node (or one instance per node)",
                render_set(&nodes)
            ));
        }
        let packages: BTreeSet<usize> = known.iter().map(|c| c.package).collect();
        if packages.len() > 1 {
            warnings.push(format!(
                "--cpus spans sockets {}: cross-shard hops cross the socket interconnect",
                render_set(&packages)
            ));
        }
        let distinct_cores = cores.len() + list.len() - known.len();
        if shards > distinct_cores {
            warnings.push(format!(
                "{shards} shards on {distinct_cores} physical core(s): shards will share cores"
            ));
        }
        let allowed: BTreeSet<usize> = allowed.iter().copied().collect();
        let outside: Vec<usize> = list.difference(&allowed).copied().collect();
        if !outside.is_empty() {
            warnings.push(format!(
                "--cpus {} outside the CPUs this process may run on ({}): pinning there fails",
                render_cpu_list(&outside),
                render_cpu_list(&allowed.iter().copied().collect::<Vec<_>>())
            ));
        }
        warnings
    }
}

struct RawCpu {
    package: usize,
    core_id: Option<usize>,
    siblings: Option<Vec<usize>>,
}

fn read_number(path: &Path) -> Option<usize> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Parses the kernel's CPU list format ("0-3,8,10-11").
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    if s.is_empty() {
        return Some(out);
    }
    for part in s.split(',') {
        let part = part.trim();
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?),
            None => {
                let n = part.parse::<usize>().ok()?;
                (n, n)
            }
        };
        if a > b || b > MAX_CPU_ID {
            return None;
        }
        out.extend(a..=b);
    }
    Some(out)
}

/// "0-3,8" from ids (sorted and deduplicated first).
pub fn render_cpu_list(ids: &[usize]) -> String {
    let set: BTreeSet<usize> = ids.iter().copied().collect();
    let ids: Vec<usize> = set.into_iter().collect();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let start = ids[i];
        while i + 1 < ids.len() && ids[i + 1] == ids[i] + 1 {
            i += 1;
        }
        parts.push(if ids[i] == start {
            start.to_string()
        } else {
            format!("{start}-{}", ids[i])
        });
        i += 1;
    }
    parts.join(",")
}

fn render_set(s: &BTreeSet<usize>) -> String {
    s.iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two sockets = two nodes, 4 cores each, SMT2 numbered like Linux on x86:
    /// CPUs 0-7 are the first threads, 8-15 their siblings (cpu n and n+8 share a core).
    fn two_socket_smt() -> Topology {
        let rows: Vec<_> = (0..16)
            .map(|id| {
                let core = id % 8;
                let node = core / 4;
                (id, core, node, node)
            })
            .collect();
        Topology::from_rows(&rows)
    }

    #[test]
    fn one_shard_per_core_on_one_node() {
        let t = two_socket_smt();
        let all: Vec<usize> = (0..16).collect();
        let c = t.choose(&all);
        assert_eq!(c.preferred, [0, 1, 2, 3]);
        assert_eq!(c.node, 0);
        // Then the other node's cores, then siblings (own node first).
        assert_eq!(c.spill, [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
    }

    #[test]
    fn follows_the_affinity_mask() {
        let t = two_socket_smt();
        // taskset -c 5-7,12-15: node 1 has the most allowed CPUs.
        let c = t.choose(&[5, 6, 7, 12, 13, 14, 15]);
        assert_eq!(c.node, 1);
        // Core 4 is allowed only through its sibling 12.
        assert_eq!(c.preferred, [5, 6, 7, 12]);
        assert_eq!(c.spill, [13, 14, 15]);
        // Only siblings allowed: each core still gets one shard.
        let c = t.choose(&[9, 10]);
        assert_eq!((c.preferred, c.node), (vec![9, 10], 0));
        // Ties between nodes go to the lower node.
        let c = t.choose(&[1, 6]);
        assert_eq!((c.preferred, c.spill, c.node), (vec![1], vec![6], 0));
    }

    #[test]
    fn no_smt_single_node() {
        let t = Topology::from_rows(&[(0, 0, 0, 0), (1, 1, 0, 0)]);
        let c = t.choose(&[0, 1]);
        assert_eq!((c.preferred, c.spill), (vec![0, 1], vec![]));
        assert!(t.check(&[0, 1], 2, &[0, 1]).is_empty());
        assert!(t.check(&[1], 1, &[0, 1]).is_empty());
    }

    #[test]
    fn warns_about_explicit_lists() {
        let t = two_socket_smt();
        let all: Vec<usize> = (0..16).collect();
        assert!(t.check(&[0, 1, 2, 3], 4, &all).is_empty());
        let w = t.check(&[0, 8, 1], 3, &all);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].contains("SMT siblings") && w[0].contains("0,8"),
            "{w:?}"
        );
        assert!(w[1].contains("3 shards on 2 physical core"), "{w:?}");
        let w = t.check(&[3, 4], 2, &all);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("NUMA nodes 0,1"));
        assert!(w[1].contains("sockets 0,1"));
        let w = t.check(&[0, 1], 4, &all);
        assert_eq!(
            w,
            ["4 shards on 2 physical core(s): shards will share cores"]
        );
        let w = t.check(&[0, 99], 2, &all);
        assert!(w.iter().any(|m| m.contains("--cpus 99 outside")), "{w:?}");
    }

    #[test]
    fn reads_a_sysfs_tree() {
        let root = std::env::temp_dir().join(format!("tessera-topo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        // 1 socket, 2 cores x 2 threads (siblings 0,2 and 1,3), node 0; cpu4 offline.
        for (cpu, core, sib) in [(0, 0, "0,2"), (1, 1, "1,3"), (2, 0, "0,2"), (3, 1, "1,3")] {
            let d = root.join(format!("devices/system/cpu/cpu{cpu}/topology"));
            std::fs::create_dir_all(&d).expect("mkdir");
            std::fs::write(d.join("core_id"), format!("{core}\n")).expect("write");
            std::fs::write(d.join("physical_package_id"), "0\n").expect("write");
            std::fs::write(d.join("thread_siblings_list"), format!("{sib}\n")).expect("write");
        }
        std::fs::create_dir_all(root.join("devices/system/cpu/cpu4")).expect("mkdir");
        let n = root.join("devices/system/node/node0");
        std::fs::create_dir_all(&n).expect("mkdir");
        std::fs::write(n.join("cpulist"), "0-3\n").expect("write");
        let t = Topology::read_sysfs(&root).expect("readable");
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(t.cpus.len(), 4);
        assert_eq!(t.cpus[&3].core, 1);
        assert_eq!(t.cpus[&2].core, 0);
        let c = t.choose(&[0, 1, 2, 3]);
        assert_eq!((c.preferred, c.spill), (vec![0, 1], vec![2, 3]));
    }

    #[test]
    fn core_id_without_sibling_list() {
        let mut raw = BTreeMap::new();
        for (id, core) in [(0, 0), (1, 0), (2, 1)] {
            raw.insert(
                id,
                RawCpu {
                    package: 0,
                    core_id: Some(core),
                    siblings: None,
                },
            );
        }
        let t = Topology::assemble(raw, &BTreeMap::new());
        assert_eq!(t.cpus[&1].core, 0);
        assert_eq!(t.choose(&[0, 1, 2]).preferred, [0, 2]);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,8"), Some(vec![0, 1, 2, 3, 8]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(render_cpu_list(&[8, 0, 1, 2, 3, 10]), "0-3,8,10");
        assert_eq!(render_cpu_list(&[]), "");
    }

    #[test]
    fn this_machine() {
        // Whatever the host looks like, the choice is non-empty and within the mask.
        let allowed = crate::server::allowed_cpus();
        let t = Topology::detect(&allowed);
        let c = t.choose(&allowed);
        assert!(!c.preferred.is_empty());
        assert!(c
            .preferred
            .iter()
            .chain(&c.spill)
            .all(|id| allowed.contains(id)));
        assert_eq!(c.preferred.len() + c.spill.len(), allowed.len());
    }
}
