"""What a run keeps in the bucket: models and datasets delivered content-addressed (delivery), and trained models
registered in Kubeflow's Model Registry (registry)."""
