import math

import numpy as np

from strata import metrics


def test_metrics_values():
    a = np.array([0.0, 1.0, 2.0, 4.0])
    b = np.array([0.0, 1.5, 2.0, 3.0])
    assert metrics.max_abs_error(a, b) == 1.0
    assert metrics.value_range(a) == 4.0
    mse = (0.25 + 1.0) / 4
    assert math.isclose(metrics.psnr(a, b), 20 * math.log10(4) - 10 * math.log10(mse))
    assert math.isclose(metrics.nrmse(a, b), math.sqrt(mse) / 4)
    assert metrics.psnr(a, a) == math.inf
    assert metrics.compression_ratio(400, 100) == 4 and metrics.bit_rate(100, 50) == 4


def test_metrics_ignore_nonfinite_originals():
    a = np.array([np.nan, 1.0, 3.0, np.inf])
    b = np.array([np.nan, 1.25, 3.0, np.inf])
    assert metrics.max_abs_error(a, b) == 0.25 and metrics.value_range(a) == 2.0
