"""Audio deepfake (spoofing) detection: detection scores, ASVspoof metrics, score files
and DET curves.

The metrics take one path, from the bottom up: :mod:`.trials` (validated CM and ASV trials,
the per-attack split, the ASV score file) and :mod:`.costs` (cost-model checks) feed
:mod:`.curves` (the operating points and the scripts' trial-by-trial DET curve); on those,
:mod:`.detection` computes the interpolated metrics, :mod:`.challenge_metrics` the ASVspoof
scripts' own values, :mod:`.sasv_metrics` the tandem ones of ASVspoof 2021 / 5, and
:mod:`.bootstrap` their intervals; :mod:`.metrics` registers them as evaluation metrics."""
