# The training code of seed 000 (../shared/seeds/, a user question), as its user wrote it.
from datasets import load_dataset
from trl import SFTTrainer
from transformers import AutoModelForCausalLM, AutoTokenizer

# 加载数据集（分布式训练会自动分片数据）
dataset = load_dataset("imdb", split="train")

# 加载模型与分词器
model = AutoModelForCausalLM.from_pretrained(
    "NousResearch/Llama-2-70b-hf",
    device_map="auto"  # 自动分配模型权重到可用GPU
)
tokenizer = AutoTokenizer.from_pretrained("NousResearch/Llama-2-70b-hf")
tokenizer.pad_token = tokenizer.eos_token  # Llama默认无pad token，需手动指定

# 初始化SFTTrainer
trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=dataset,
    dataset_text_field="text",
    max_seq_length=512,
)

# 启动训练
trainer.train()
