//! The `arraybridge` command-line tool (see the `arraybridge_cli` crate).

fn main() -> std::process::ExitCode {
    arraybridge_cli::main()
}
