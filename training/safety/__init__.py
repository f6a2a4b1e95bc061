"""The safety classifier's offline tooling: the labelled splits (``splits``), training (``train``,
``lora``) and the evaluation behind ``make eval-safety`` (``eval``). The runtime guard is ``switchyard.libs.safety``;
the one thing it takes from here is the model file ``train`` writes (``switchyard/libs/safety/data/classifier.npz``)."""
