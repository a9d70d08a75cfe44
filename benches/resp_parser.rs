//! RESP request parsing (src/protocol/parser.rs): the first thing every request costs.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use tessera::protocol::parser::{ParseLimits, RequestParser};

fn multibulk(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Parses every command in `buf`, as the connection loop does for a pipelined read.
fn parse_all(parser: &mut RequestParser, buf: &[u8], limits: &ParseLimits) -> usize {
    let mut args = Vec::new();
    let mut pos = 0;
    let mut n = 0;
    while pos < buf.len() {
        match parser.parse(&buf[pos..], limits, &mut args) {
            Ok(Some(used)) => {
                pos += used;
                n += args.len();
            }
            _ => break,
        }
    }
    n
}

fn bench(c: &mut Criterion) {
    let limits = ParseLimits::default();
    let get = multibulk(&[b"GET", b"key:000123456"]);
    let set = multibulk(&[b"SET", b"key:000123456", &[b'x'; 32]]);
    let big = multibulk(&[b"SET", b"key:000123456", &vec![b'x'; 16 * 1024]]);
    let pipeline: Vec<u8> = get.repeat(16);
    let inline = b"SET key:000123456 \"hello world\"\r\n".to_vec();
    let mut g = c.benchmark_group("resp_parser");
    for (name, buf) in [
        ("get", &get),
        ("set_32b", &set),
        ("set_16k", &big),
        ("get_pipeline16", &pipeline),
        ("inline_set", &inline),
    ] {
        g.throughput(Throughput::Bytes(buf.len() as u64));
        g.bench_function(name, |b| {
            let mut parser = RequestParser::new();
            b.iter(|| parse_all(&mut parser, black_box(buf), &limits))
        });
    }
    // A command arriving in 7-byte pieces: the resumable path.
    g.throughput(Throughput::Bytes(set.len() as u64));
    g.bench_function("set_32b_trickled", |b| {
        b.iter_batched(
            RequestParser::new,
            |mut parser| {
                let mut args = Vec::new();
                let mut end = 0;
                loop {
                    end = (end + 7).min(set.len());
                    match parser.parse(&set[..end], &limits, &mut args) {
                        Ok(None) if end < set.len() => continue,
                        other => break other.is_ok(),
                    }
                }
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
