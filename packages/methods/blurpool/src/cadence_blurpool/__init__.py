"""BlurPool for cadence: anti-aliased strided convolutions and max-pooling (Zhang, ICML 2019).

`apply_blurpool` changes a model for your own training loop; `BlurPool` is the method for
`cadence.Trainer`; the layers (`BlurConv2d`, `BlurMaxPool2d`, `BlurPool2d`) and the tensor
functions (`blur_2d`, `blurmax_pool2d`) build anti-aliased models by hand.
"""

from cadence_blurpool.algorithm import BlurPool
from cadence_blurpool.functional import apply_blurpool
from cadence_blurpool.layers import BlurConv2d, BlurMaxPool2d, BlurPool2d, blur_2d, blurmax_pool2d

__all__ = ["BlurConv2d", "BlurMaxPool2d", "BlurPool", "BlurPool2d", "apply_blurpool", "blur_2d", "blurmax_pool2d"]
