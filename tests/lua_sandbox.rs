//! Issue 22's Lua findings, black-box: sandbox escapes and their audit compared with
//! a real redis-server 7.0, poisoning that must not reach other clients, library
//! inputs that must never panic the server, and measured Lua memory.

mod common;
use common::*;

fn eval(port: u16, script: &str, args: &[&[u8]]) -> Result<redis::Value, String> {
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection())
        .expect("connect");
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script).arg(0);
    for a in args {
        cmd.arg(*a);
    }
    cmd.query::<redis::Value>(&mut c).map_err(|e| e.to_string())
}

/// Scripts whose replies must be Redis's, byte for byte (errors included).
const SAME_AS_REDIS: &[&str] = &[
    "getmetatable('').__index = {byte=function() return 0 end} local f = loadstring(string.dump(function() return 'bytecode ran' end)) return f()",
    "getmetatable('').__index = {upper=function() return 'pwned' end} return 1",
    "local f = loadstring(string.dump(function() return 'bytecode ran' end)) return f()",
    "return select(2, loadstring(string.dump(function() end)))",
    "local s=string.dump(function() return 1 end) local i=0 return {load(function() i=i+1 if i==1 then return s end end)}",
    "local i=0 return select(2, load(function() i=i+1 if i==1 then return 'x=' end end))",
    "return {load(string.dump(function() return 1 end))}",
    "getmetatable('').__index.upper = function() return 'x' end return 1",
    "getmetatable('').x = 1 return 1",
    "setmetatable(getmetatable(''), {}) return 1",
    "rawset(getmetatable(''), '__index', {}) return 1",
    "rawset(getmetatable('').__index, 'upper', 1) return 1",
    "return getmetatable('').__index == string",
    "return type(getmetatable(getmetatable('')))",
    "string.upper = 1 return 1",
    "rawset(string, 'upper', 1) return 1",
    "table.insert(string, 'x') return 1",
    "table.insert(_G, 'x') return 1",
    "cjson.encode = 1 return 1",
    "cmsgpack.pack = 1 return 1",
    "struct.pack = 1 return 1",
    "bit.band = 1 return 1",
    "redis.call = 1 return 1",
    "x = 1 return 1",
    "rawset(_G, 'x', 1) return 1",
    "setmetatable(_G, {}) return 1",
    "return type(getmetatable(string))",
    "getmetatable(_G).__index = nil return 1",
    "rawset(getmetatable(_G), '__index', nil) return 1",
    "return type(getmetatable(_G).__index)",
    "return rawget(string, 'upper') ~= nil",
    "local n=0 for k,v in pairs(string) do n=n+1 end return n",
    "return type(package)",
    "return type(require)",
    "return type(debug)",
    "return type(setfenv)",
    "return type(getfenv)",
    "return type(newproxy)",
    "return type(load)",
    "return type(print)",
    "return collectgarbage('count') > 0",
    "local co = coroutine.wrap(function() string.upper = 1 end) co() return 1",
    "return {pcall(function() string.upper = 1 end)}",
    "return {pcall(rawset, string, 'x', 1)}",
    "return {pcall(setmetatable, string, {})}",
    "return {loadstring('x = 1')()}",
    "error('x')",
    "error({err='x'})",
    "return cmsgpack.unpack(string.rep('\\145', 100000))",
    "return {pcall(cmsgpack.unpack, string.rep('\\145', 100000))}",
    "return cmsgpack.unpack(string.rep('\\129', 50000))",
    "return cmsgpack.pack()",
    "return cjson.decode('\"\\\\ud800\"')",
    "return cjson.decode('x')",
    "return {pcall(function() return cjson.decode('x') end)}",
    "return cjson.decode('[1,2')",
    "return cjson.decode()",
    "return struct.unpack('!99999i','xxxx')",
    "return struct.unpack('i4','xxxx',-100)",
    "return struct.unpack('i9','xxxxxxxxx')",
    "return struct.unpack('<i16',struct.pack('<i16', -2))",
    "return struct.pack('i33', 1)",
    "return struct.pack('c5', 'ab')",
    "return {struct.unpack('bc0', '\\3abcd')}",
    "return struct.size('s')",
    "return 0/0",
];

#[test]
fn sandbox_replies_match_redis() {
    let reference = ReferenceRedis::start().expect("redis-server 7.0 must be installed");
    let s = Server::start(2);
    let mut diffs = Vec::new();
    for script in SAME_AS_REDIS {
        let want = eval(reference.port, script, &[]);
        let got = eval(s.port, script, &[]);
        if want != got {
            diffs.push(format!("{script}\n  redis:   {want:?}\n  tessera: {got:?}"));
        }
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

#[test]
fn poisoning_does_not_reach_other_clients() {
    let s = Server::start(2);
    let poison = [
        "getmetatable('').__index = {upper=function() return 'pwned' end} return 1",
        "getmetatable('').__index.upper = function() return 'pwned' end return 1",
        "table.insert(string, 'pwned') return 1",
        "rawset(getmetatable(''), '__index', {upper=function() return 'pwned' end}) return 1",
    ];
    // Each on fresh connections, so both shards' VMs get every attempt.
    for p in poison {
        for _ in 0..4 {
            let _ = eval(s.port, p, &[]);
        }
    }
    for _ in 0..8 {
        assert_eq!(
            eval(s.port, "return ('a'):upper()", &[]),
            Ok(redis::Value::BulkString(b"A".to_vec()))
        );
        assert_eq!(
            eval(s.port, "return #string", &[]),
            Ok(redis::Value::Int(0))
        );
    }
}

/// A small deterministic generator (no dependency, same inputs every run).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn deep_inputs(rng: &mut Lcg) -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    for _ in 0..100 {
        let depth = rng.below(20_000) as usize;
        let unit: &[u8] = match rng.below(5) {
            0 => b"\x91",
            1 => b"\x81",
            2 => b"\x81\x01",
            3 => b"\xdc\x00\x01",
            _ => b"\x91\x81\x01",
        };
        let mut b = unit.repeat(depth);
        if rng.below(2) == 0 {
            b.push(0xc0);
        }
        out.push(("cmsgpack", b));
        let mut junk = Vec::new();
        for _ in 0..rng.below(64) {
            junk.push(rng.below(256) as u8);
        }
        out.push(("cmsgpack", junk));
        let open = ["[", "{\"a\":", "[{\"b\":"][rng.below(3) as usize];
        let mut j = open.repeat(rng.below(3000) as usize).into_bytes();
        if rng.below(2) == 0 {
            j.extend_from_slice(b"\"\\ud800\"");
        }
        out.push(("cjson", j));
        let mut fmt = Vec::new();
        for _ in 0..rng.below(40) {
            fmt.push(b"bBhHlLTiIfdxcs<>! 0123456789z=9"[rng.below(31) as usize]);
        }
        out.push(("struct", fmt));
    }
    out.push(("cmsgpack", vec![0x91; 100_000]));
    out.push(("cmsgpack", vec![0x81; 50_000]));
    out.push(("cmsgpack", vec![0x90; 20_000]));
    out.push(("struct", b"c1".repeat(9000)));
    out
}

#[test]
fn library_inputs_never_panic() {
    let log = std::env::temp_dir().join(format!("tessera-lua-sandbox-{}.log", std::process::id()));
    let s = Server::start_logged(2, &log);
    let mut rng = Lcg(22);
    let data = vec![b'x'; 20_000];
    for (lib, input) in deep_inputs(&mut rng) {
        let script = match lib {
            "cmsgpack" => "local ok, e = pcall(cmsgpack.unpack, ARGV[1]) return ok and 1 or tostring(e)",
            "cjson" => "local ok, e = pcall(cjson.decode, ARGV[1]) return ok and 1 or tostring(e)",
            _ => "local ok, e = pcall(struct.unpack, ARGV[1], ARGV[2]) return ok and 1 or tostring(e)",
        };
        let r = eval(s.port, script, &[&input, &data]);
        // pcall caught whatever went wrong: the reply is never a script error.
        assert!(
            r.is_ok(),
            "{lib} {:?}: {r:?}",
            &input[..input.len().min(32)]
        );
        // And without pcall the error reaches the client as an error reply.
        let direct = match lib {
            "cmsgpack" => "return type(cmsgpack.unpack(ARGV[1]))",
            "cjson" => "return type(cjson.decode(ARGV[1]))",
            _ => "return type(struct.unpack(ARGV[1], ARGV[2]))",
        };
        let _ = eval(s.port, direct, &[&input, &data]);
    }
    assert_eq!(eval(s.port, "return 1", &[]), Ok(redis::Value::Int(1)));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(!text.contains("panicked at"), "{text}");
}

fn lua_memory(port: u16) -> u64 {
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection())
        .expect("connect");
    let info: String = q(&mut c, &["INFO", "memory"]);
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory_lua:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory_lua")
}

#[test]
fn used_memory_lua_is_measured() {
    let s = Server::start(2);
    let _ = eval(s.port, "return 1", &[]);
    let before = lua_memory(s.port);
    assert!(before > 0, "{before}");
    for i in 0..200 {
        let script = format!("local t = {{}} for i = 1, 100 do t[i] = '{i}' .. i end return #t");
        let _ = eval(s.port, &script, &[]);
    }
    let after = lua_memory(s.port);
    assert!(after > before, "before {before}, after {after}");
}
