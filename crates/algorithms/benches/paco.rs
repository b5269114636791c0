//! PACO on a synthetic 61×100×100 ADI cube (the size of the reference figures), CPU.
//!
//! `cargo bench -p algorithms --bench paco`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use algorithms::paco::bench::synthetic_adi;
use algorithms::paco::{PacoParams, PsfNorm, SubPixel, Variant, paco};
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let (cube, angles, psf) = synthetic_adi(61, 100, 7);
    let mut g = c.benchmark_group("paco_61x100x100");
    g.sample_size(10);
    for (name, sub) in [
        ("nosubpix", SubPixel::Off),
        ("subpix_table32", SubPixel::Table { q: 32 }),
        ("subpix_spline5", SubPixel::Spline5),
    ] {
        let p = PacoParams {
            variant: Variant::Vip,
            subpixel: sub,
            psf_norm: PsfNorm::Factor(9.54),
            ..Default::default()
        };
        g.bench_function(name, |b| {
            b.iter(|| paco(cube.view(), angles.view(), psf.view(), &p).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
