from mathneuro.pipeline.cli import main

main()
