"""Model trees and weights: what makes a directory a model (model_tree, weights), GGUF conversion, the built-in
tiny model, building the model for training (model, fused_lora), merging an adapter (merge)."""
