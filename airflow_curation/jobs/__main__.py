import sys

from airflow_curation.jobs import main

if __name__ == "__main__":
    sys.exit(main())
