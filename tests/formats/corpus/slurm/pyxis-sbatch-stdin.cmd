# corpus: mirrors NVIDIA/pyxis README.md ("sbatch": the script on stdin, the image's '#' escaped)
# job: sbatch
# expect: image=nvcr.io/nvidia/pytorch:21.12-py3 nodes=1 state=Succeeded exit=0 log~python 3.
sbatch --wait -o slurm.out <<EOF
#!/bin/bash
#SBATCH --container-image nvcr.io\#nvidia/pytorch:21.12-py3

python -c 'import platform ; print("python", platform.python_version())'
EOF
