//! The hop lab (issue 30): the CPU a command costs when its key lives on another core,
//! against the same command run on the core its connection lives on.
//!
//!     cargo bench --bench hop_lab -- [--cpus 0,1] [--commands N] [--repeat R]
//!                                    [--depths 1,16] [--conns 1,50] [--only local|remote]
//!
//! One process runs the real server with two shards pinned to the two CPUs. Its
//! connections are in-process scripted clients (`runtime::ScriptedClient`): the
//! server reads their requests and writes their replies through its ordinary
//! connection code, but no byte touches a socket, so what is measured is the
//! server's own work per command: parsing, routing, the hop (batch, mesh message,
//! wake-up, reply) and the command. Every reply is checked against the script.
//!
//! Each case puts all its connections on shard 0 and sends 1:10 SET:GET with 32-byte
//! values over keys that all live on shard 0 (`local`) or all on shard 1
//! (`remote`), `depth` commands per round (1 = one at a time, 16 = pipelined). CPU
//! is the whole process's (getrusage, both CPUs), per command; `shard0` is the
//! connections' shard alone (its thread's clock), `other` the rest (shard 1, and
//! the negligible idle threads). Cases run interleaved, `--repeat` times; the
//! summary takes each case's median.
//!
//! The model for a host with S shards and keys spread evenly: a command is local
//! with probability 1/S, so CPU per command = local/S + (S-1)/S * remote. The
//! summary prints it for S = 8 next to the 16-CPU anchor of issue 30.

use std::cell::RefCell;
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::mpsc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use tessera::effects::encode_command;
use tessera::runtime::{self, Script, ScriptedClient, TcpStream};
use tessera::shard::ShardCell;

/// The server's allocator and its options (src/main.rs): the lab measures the
/// server as it ships.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[export_name = "_rjem_malloc_conf"]
pub static MALLOC_CONF: Option<&'static u8> =
    Some(&b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0"[0]);

const KEYS: usize = 100_000;
const VALUE: &[u8] = b"vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv";
/// Distinct rounds per connection's script (cycled): enough that keys vary.
const SCRIPT_ROUNDS: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Place {
    Local,
    Remote,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    depth: usize,
    conns: usize,
    place: Place,
}

struct Report {
    case: Case,
    commands: u64,
    wall: Duration,
    total_cpu: Duration,
    shard0_cpu: Duration,
}

struct Options {
    cpus: String,
    commands: u64,
    repeat: usize,
    depths: Vec<usize>,
    conns: Vec<usize>,
    places: Vec<Place>,
}

fn parse_list(s: &str) -> Vec<usize> {
    s.split(',').filter_map(|x| x.trim().parse().ok()).collect()
}

fn options() -> Options {
    let mut o = Options {
        cpus: "0,1".into(),
        commands: 400_000,
        repeat: 3,
        depths: vec![1, 16],
        conns: vec![1, 50],
        places: vec![Place::Local, Place::Remote],
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_default();
        match a.as_str() {
            "--cpus" => o.cpus = value(),
            "--commands" => o.commands = value().parse().unwrap_or(o.commands),
            "--repeat" => o.repeat = value().parse().unwrap_or(o.repeat),
            "--depths" => o.depths = parse_list(&value()),
            "--conns" => o.conns = parse_list(&value()),
            // One side only (for a profile of it): local or remote.
            "--only" => {
                o.places = match value().as_str() {
                    "local" => vec![Place::Local],
                    _ => vec![Place::Remote],
                }
            }
            // cargo bench passes --bench; nothing else is expected.
            _ => {}
        }
    }
    o
}

fn process_cpu() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn thread_cpu() -> Duration {
    // SAFETY: clock_gettime fills the timespec it is given.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
        ts
    };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn get_reply() -> Vec<u8> {
    let mut r = format!("${}\r\n", VALUE.len()).into_bytes();
    r.extend_from_slice(VALUE);
    r.extend_from_slice(b"\r\n");
    r
}

/// xorshift: the same key sequence in every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// One connection's script: rounds of `depth` commands, one SET to ten GETs, on
/// keys drawn from `keys`.
fn mixed_script(keys: &[Vec<u8>], depth: usize, rng: &mut Rng) -> Script {
    let get = get_reply();
    let mut script = Script::default();
    let (mut req, mut rep) = (Vec::new(), Vec::new());
    for round in 0..SCRIPT_ROUNDS {
        req.clear();
        rep.clear();
        for i in 0..depth {
            let key = &keys[rng.below(keys.len())];
            if (round * depth + i).is_multiple_of(11) {
                encode_command::<&[u8]>(&mut req, &[b"SET", key, VALUE]);
                rep.extend_from_slice(b"+OK\r\n");
            } else {
                encode_command::<&[u8]>(&mut req, &[b"GET", key]);
                rep.extend_from_slice(&get);
            }
        }
        script.push_round(&req, &rep);
    }
    script
}

/// A script that SETs every key of `keys` once, 16 per round.
fn load_script(keys: &[Vec<u8>]) -> Script {
    let mut script = Script::default();
    for chunk in keys.chunks(16) {
        let mut req = Vec::new();
        for key in chunk {
            encode_command::<&[u8]>(&mut req, &[b"SET", key, VALUE]);
        }
        script.push_round(&req, &b"+OK\r\n".repeat(chunk.len()));
    }
    script
}

/// Connections still running, and the driver's waker.
#[derive(Default)]
struct Running {
    left: usize,
    errors: Vec<String>,
    waker: Option<Waker>,
}

/// Runs one connection per (script, rounds) on this shard and waits for all.
async fn run_clients(cell: &Rc<ShardCell>, clients: Vec<(Rc<Script>, u64)>) -> Vec<String> {
    let running = Rc::new(RefCell::new(Running {
        left: clients.len(),
        ..Default::default()
    }));
    for (script, rounds) in clients {
        let r = running.clone();
        let client = ScriptedClient::new(script, rounds, move |outcome| {
            let mut r = r.borrow_mut();
            r.left -= 1;
            if let Err(e) = outcome {
                r.errors.push(e);
            }
            if r.left == 0 {
                if let Some(w) = r.waker.take() {
                    w.wake();
                }
            }
        });
        match TcpStream::scripted(client) {
            Ok(stream) => runtime::spawn_detached(tessera::connection::serve(cell.clone(), stream)),
            Err(e) => running.borrow_mut().errors.push(format!("socketpair: {e}")),
        }
    }
    poll_fn(|cx| {
        let mut r = running.borrow_mut();
        if r.left == 0 {
            Poll::Ready(std::mem::take(&mut r.errors))
        } else {
            r.waker = Some(cx.waker().clone());
            Poll::Pending
        }
    })
    .await
}

async fn run_case(
    cell: &Rc<ShardCell>,
    keys: &[Vec<Vec<u8>>; 2],
    case: Case,
    commands: u64,
    seed: u64,
) -> Result<Report, String> {
    let mut rng = Rng(seed | 1);
    let keys = &keys[if case.place == Place::Local { 0 } else { 1 }];
    let rounds = (commands / (case.conns * case.depth) as u64).max(1);
    let clients = (0..case.conns)
        .map(|_| (Rc::new(mixed_script(keys, case.depth, &mut rng)), rounds))
        .collect();
    let (cpu0, thread0, started) = (process_cpu(), thread_cpu(), Instant::now());
    let errors = run_clients(cell, clients).await;
    let (cpu1, thread1, wall) = (process_cpu(), thread_cpu(), started.elapsed());
    if let Some(e) = errors.first() {
        return Err(format!("{case:?}: {e}"));
    }
    Ok(Report {
        case,
        commands: rounds * (case.conns * case.depth) as u64,
        wall,
        total_cpu: cpu1 - cpu0,
        shard0_cpu: thread1 - thread0,
    })
}

/// The lab, on shard 0: loads the keys, then runs every case `repeat` times.
async fn drive(
    cell: Rc<ShardCell>,
    cases: Vec<Case>,
    o: (u64, usize),
    tx: mpsc::Sender<Result<Report, String>>,
) {
    let (commands, repeat) = o;
    let mut keys: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
    for n in 0..KEYS {
        let key = format!("key:{n:08}").into_bytes();
        let s = cell.shard_of(&key);
        if s < 2 {
            keys[s].push(key);
        }
    }
    let load = keys
        .iter()
        .map(|k| (Rc::new(load_script(k)), k.len().div_ceil(16) as u64))
        .collect();
    if let Some(e) = run_clients(&cell, load).await.first() {
        let _ = tx.send(Err(format!("loading keys: {e}")));
        return;
    }
    for r in 0..repeat {
        for (i, case) in cases.iter().enumerate() {
            let report = run_case(&cell, &keys, *case, commands, (r * 1000 + i) as u64).await;
            let failed = report.is_err();
            if tx.send(report).is_err() || failed {
                return;
            }
        }
    }
}

fn micros_per(d: Duration, n: u64) -> f64 {
    d.as_secs_f64() * 1e6 / n as f64
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied()
}

fn main() {
    let o = options();
    let mut cases = Vec::new();
    for &depth in &o.depths {
        for &conns in &o.conns {
            for &place in &o.places {
                cases.push(Case {
                    depth,
                    conns,
                    place,
                });
            }
        }
    }
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(Some(tx));
    let plan = (cases.clone(), o.commands, o.repeat);
    tessera::server::on_shard_start(move |cell| {
        if cell.id != 0 {
            return;
        }
        if let Some(tx) = tx.lock().ok().and_then(|mut t| t.take()) {
            let (cases, commands, repeat) = plan.clone();
            runtime::spawn_detached(drive(cell.clone(), cases, (commands, repeat), tx));
        }
    });
    let sock = std::env::temp_dir().join(format!("tessera-hop-lab-{}.sock", std::process::id()));
    let args = [
        "--threads",
        "2",
        "--cpus",
        &o.cpus,
        "--port",
        "0",
        "--unixsocket",
        &sock.display().to_string(),
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    .map(String::from);
    let config = match tessera::config::Config::load(args.into_iter()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hop lab: {e}");
            std::process::exit(2);
        }
    };
    std::thread::spawn(move || tessera::server::run(config));

    println!(
        "hop lab: 2 shards on CPUs {}, {} commands per case, 1:10 SET:GET, {} keys, {}-byte values",
        o.cpus,
        o.commands,
        KEYS,
        VALUE.len()
    );
    println!(
        "{:>5} {:>5} {:>6} {:>10} {:>9} {:>11} {:>11} {:>11}",
        "depth", "conns", "keys", "commands", "kops/s", "cpu us/cmd", "shard0", "other"
    );
    let mut results: Vec<(Case, f64)> = Vec::new();
    for _ in 0..cases.len() * o.repeat {
        let report = match rx.recv_timeout(Duration::from_secs(300)) {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                eprintln!("hop lab failed: {e}");
                std::process::exit(1);
            }
            Err(e) => {
                eprintln!("hop lab: no result ({e})");
                std::process::exit(1);
            }
        };
        let c = report.case;
        let total = micros_per(report.total_cpu, report.commands);
        let shard0 = micros_per(report.shard0_cpu, report.commands);
        println!(
            "{:>5} {:>5} {:>6} {:>10} {:>9.0} {:>11.3} {:>11.3} {:>11.3}",
            c.depth,
            c.conns,
            if c.place == Place::Local {
                "local"
            } else {
                "remote"
            },
            report.commands,
            report.commands as f64 / report.wall.as_secs_f64() / 1e3,
            total,
            shard0,
            total - shard0
        );
        results.push((c, total));
    }
    println!("\nmedians (CPU us per command, both CPUs) and the model for 8 shards:");
    println!(
        "{:>5} {:>5} {:>9} {:>9} {:>7} {:>10} {:>13}",
        "depth", "conns", "local", "remote", "ratio", "hop (d)", "8 shards/1"
    );
    for &depth in &o.depths {
        for &conns in &o.conns {
            let pick = |place| {
                median(
                    results
                        .iter()
                        .filter(|(c, _)| c.depth == depth && c.conns == conns && c.place == place)
                        .map(|(_, v)| *v)
                        .collect(),
                )
            };
            let (Some(local), Some(remote)) = (pick(Place::Local), pick(Place::Remote)) else {
                continue;
            };
            // local/8 + 7/8 remote, relative to one shard's local cost.
            let eight = (local / 8.0 + 7.0 * remote / 8.0) / local;
            println!(
                "{depth:>5} {conns:>5} {local:>9.3} {remote:>9.3} {:>7.2} {:>10.3} {eight:>13.2}",
                remote / local,
                remote - local
            );
        }
    }
    let _ = std::fs::remove_file(&sock);
    std::process::exit(0);
}
