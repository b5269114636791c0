"""The seed's particle-analysis names: ParticleDetector(...).detect_movie(movie) (the
LogDetector preset) and benchmark(...) with its printed table."""

import numpy as np
import pytest

import arraybridge as ab


def test_particle_detector_is_the_seed_preset_of_blob_log():
    movie = ab._seed.synthetic_movie((4, 64, 80), n_particles=6, seed=3)
    det = ab.ParticleDetector(min_sigma=1.0, max_sigma=3.0, threshold_rel=0.2, batch_size=2)
    assert "max_sigma=3.0" in repr(det)
    parts = det.detect_movie(movie)
    rows = ab.batch_blob_log(movie, min_sigma=1, max_sigma=3, num_sigma=10, threshold=None,
                       threshold_rel=0.2, batch_size=2)
    np.testing.assert_array_equal(np.asarray(parts["frame"]), rows[:, 0].astype(np.int64))
    np.testing.assert_array_equal(np.asarray(parts["y"]), rows[:, 1])
    assert len(parts) >= 4 * 5, len(parts)
    # a 2-D image is frame 0
    one = det.detect_movie(movie[0])
    assert (np.asarray(one["frame"]) == 0).all() and len(one) > 0
    assert ab.ParticleDetectorGPU is ab.ParticleDetector
    assert isinstance(ab.is_gpu_available(), bool)


def test_benchmark_returns_and_prints_a_table(capsys):
    t = ab.benchmark(movie_size=(6, 64, 64), n_particles=5, batch_sizes=[1, 3], device="cpu")
    out = capsys.readouterr().out
    assert "frames/s" in out and out.count("\n") == 3
    assert list(np.asarray(t["batch_size"])) == [1, 3]
    assert (np.asarray(t["frames_per_s"]) > 0).all()
    p = np.asarray(t["particles"])
    assert p[0] == p[1] > 0  # the batch size changes no result
    with pytest.raises(ab.InvalidInput):
        ab.benchmark(movie_size=(2, 16, 16), batch_sizes=[0], verbose=False)
