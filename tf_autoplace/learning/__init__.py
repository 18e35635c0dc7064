"""The machinery the learned placers share: rollouts and worker pools, PPO, Adam, policy
checkpoints and manifests, fine-tuned policies kept for reuse, measured rewards, and the
TensorFlow context policies run in."""
