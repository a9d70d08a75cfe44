//! (Being written: see the collections and bitmaps issues.)

use super::table::CommandSpec;

pub static COMMANDS: &[CommandSpec] = &[];
