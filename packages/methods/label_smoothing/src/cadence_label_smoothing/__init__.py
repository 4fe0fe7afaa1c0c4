"""Label smoothing for cadence: mix the targets with the uniform distribution over classes.

Szegedy et al., "Rethinking the Inception Architecture for Computer Vision", CVPR 2016.
`smooth_labels` is the function for your own training loop; `LabelSmoothing` is the method for
`cadence.Trainer`.
"""

from cadence_label_smoothing.algorithm import LabelSmoothing as LabelSmoothing
from cadence_label_smoothing.functional import smooth_labels as smooth_labels

__all__ = ["LabelSmoothing", "smooth_labels"]
