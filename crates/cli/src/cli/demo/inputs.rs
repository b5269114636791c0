//! The generated inputs under `inputs/` (so that `detect`, `track` and `paco` can be run on them
//! by hand), and the one file writer of the demo.

use std::path::Path;

use algorithms::detect::Movie;
use algorithms::synth::adi::AdiWithPlanet;
use algorithms::synth::movie::TruthPoint;
use arraybridge::io::csv::create_writer;
use arraybridge::io::{fits, npy};
use bridge_core::{BridgeError, Result};

/// Write `bytes` to `path` (an error names the file), in place only once complete
/// (`io::staged`: no partial file on an error).
pub(super) fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut f = arraybridge::io::staged::Staged::create(path)?;
    f.write_all(bytes)
        .map_err(|e| BridgeError::io(path.display().to_string(), e))?;
    f.commit()
}

/// The generated inputs, for running `detect`, `track` and `paco` by hand.
pub(super) fn write_inputs(
    dir: &Path,
    movie: &Movie,
    truth: &[TruthPoint],
    adi: &AdiWithPlanet,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| BridgeError::io(dir.display().to_string(), e))?;
    if let Movie::U16(a) = movie {
        let payload: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
        write_file(
            &dir.join("movie.npy"),
            &npy::encode_npy("<u2", a.shape(), &payload),
        )?;
    }
    let mut w = create_writer(&dir.join("truth.csv"))?;
    w.write_record(["frame", "particle", "y", "x", "sigma", "amplitude"])?;
    for t in truth {
        w.write_record([
            t.frame.to_string(),
            t.particle.to_string(),
            format!("{:.4}", t.y),
            format!("{:.4}", t.x),
            format!("{:.4}", t.sigma),
            format!("{:.3}", t.amplitude),
        ])?;
    }
    w.finish()?;
    fits::write_image(dir.join("adi_cube.fits"), &adi.cube.clone().into_dyn())?;
    fits::write_image(dir.join("adi_angles.fits"), &adi.angles.clone().into_dyn())?;
    fits::write_image(dir.join("adi_psf.fits"), &adi.psf.clone().into_dyn())
}
