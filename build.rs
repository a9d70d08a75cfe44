//! Compiles the small C file that gives INCRBYFLOAT the C `long double` arithmetic
//! and formatting Redis uses (src/util/long_double.rs says why).

fn main() {
    println!("cargo:rerun-if-changed=src/util/c/long_double.c");
    cc::Build::new()
        .file("src/util/c/long_double.c")
        .warnings(true)
        .compile("tessera_long_double");
}
