"""HC-SA's matrix source (You et al. 2020): fixed Gaussians, no parameters."""
import torch

from .matrices import PositionalAttentionMatrices


class GaussianAttentionMatrices(PositionalAttentionMatrices):
    """Hard-coded Gaussian self-attention (HC-SA, You et al. 2020): no parameters; head k's logits
    are -(j - i - c_k)² / (2σ²), a Gaussian of standard deviation σ centred c_k positions from the
    query i, shared by all layers. The first half of the heads are centred on i-1, the others on
    i+1 in an encoder and on i in a (causal) decoder."""

    def __init__(self, num_layers, num_heads, max_positions, causal, std=1.0):
        super().__init__(num_layers, num_heads, max_positions, causal)
        if std <= 0:
            raise ValueError(f"std must be positive, got {std}")
        self.std = std
        later = 0.0 if causal else 1.0
        centres = [-1.0 if k < num_heads // 2 else later for k in range(num_heads)]
        self.register_buffer("centres", torch.tensor(centres), persistent=False)
        self._consts(torch.device("cpu"))

    def _compute_logits(self, rows):
        centres = self.centres.float()
        query = torch.arange(rows, device=centres.device, dtype=torch.float32)
        key = torch.arange(self.max_positions, device=centres.device, dtype=torch.float32)
        offset = key[None, None, :] - query[None, :, None] - centres[:, None, None]
        return (-offset.pow(2) / (2 * self.std ** 2)).unsqueeze(0)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, std={self.std}, centres={self.centres.tolist()}"
