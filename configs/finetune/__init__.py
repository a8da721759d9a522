"""Fine-tuning tasks, one ``get_config(arg)`` file each: ``--config=finetune/ocnli``."""
