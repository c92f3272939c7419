#!/bin/bash
#RSA_DATA_IN=/gpfs/alice/work
#RSA_DATA_OUT=/gpfs/alice/work
